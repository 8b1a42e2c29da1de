"""llama.cpp's CUDA server on one GPU, diagnosed and swept by headroom, with the energy of each run.

    python bench/gpu/llamacpp_h200.py --server BIN --model GGUF --out DIR
        [--cases smoke,decode,slots,long,lowload,sweep] [--parallel 8] [--deadline EPOCH]

Starts ``llama-server --metrics --parallel N`` with every layer on the GPU, then, case by
case, drives a known load with its own streaming clients and reads it the way a user would:

- decode: one stream decoding (a ~1B model at batch 1: small kernels or bandwidth);
- slots: 2N streams against N slots, so N run and N wait (llama.cpp's deferred queue);
- long: N streams of fresh ~3,300-token prompts (cache_prompt off), 4-token replies;
- longcached: the same with one prompt repeated and llama.cpp's prompt cache on;
- lowload: one stream of the sweep's shape, for the headroom figure against the knee;
- lowcap: the same, with ``--max-num-seqs N`` passed to the snapshot (the cap known);
- sweep: ``headroom sweep`` stepping the concurrency from 1 to 4N.

For each case: a recording (monitor/read/recording.py: NVML+GPM, the engine page and the server's
process at 1 s), then ``headroom snapshot --json --pid``. Beside all of it a thread reads
NVML's energy counter and power at ~10 Hz, so each case and each sweep step gets joules
from the counter and from power x time, the two compared. Results go to DIR (summary.json,
recordings/, snapshot-*.json, sweep/, energy.jsonl, server.log) and, after every case, into
DIR.tar.gz, so a run cut short still returns what it had. Without NVML (a CPU build) the
energy figures are null and the rest runs the same.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import subprocess
import sys
import tarfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

CASES = ("smoke", "decode", "slots", "long", "longcached", "lowload", "lowcap", "sweep")
# Rough seconds each case needs, to skip what cannot finish before the deadline.
NEEDS_S = {
    "smoke": 10, "decode": 30, "slots": 35, "long": 35, "longcached": 35, "lowload": 25,
    "lowcap": 25, "sweep": 150,
}  # fmt: skip
WORDS = ["the", "and", "of", "to", "in", "is"]


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# -- energy -------------------------------------------------------------------------------


class Energy:
    """NVML's energy counter (mJ since driver load) and power (mW) read at ~10 Hz on GPU 0.

    Power comes two ways where the driver has both: nvmlDeviceGetPowerUsage (on recent
    GPUs a 1 s average) and the instantaneous field (NVML_FI_DEV_POWER_INSTANT)."""

    INSTANT_FIELD = 186  # NVML_FI_DEV_POWER_INSTANT

    def __init__(self, path: Path, hz: float = 10.0) -> None:
        self.samples: list[tuple[float, float, float | None, float | None]] = []
        self.error: str | None = None
        self._stop = threading.Event()
        self._path = path
        self._period = 1.0 / hz
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nvml = pynvml
            self._h = pynvml.nvmlDeviceGetHandleByIndex(0)
            pynvml.nvmlDeviceGetTotalEnergyConsumption(self._h)
        except Exception as exc:  # no driver, no GPU, or no counter: energy stays unknown
            self.error = f"NVML energy unavailable: {exc!r}"
            self._nvml = None
            return
        self._thread = threading.Thread(target=self._run, name="energy", daemon=True)
        self._thread.start()

    def _instant(self) -> float | None:
        try:
            (v,) = self._nvml.nvmlDeviceGetFieldValues(self._h, [self.INSTANT_FIELD])
            if v.nvmlReturn != 0:
                return None
            return float(v.value.uiVal)
        except Exception:
            return None

    def _run(self) -> None:
        nv = self._nvml
        with self._path.open("w") as fh:
            next_at = time.monotonic()
            while not self._stop.is_set():
                t = time.time()
                try:
                    mj = float(nv.nvmlDeviceGetTotalEnergyConsumption(self._h))
                    mw = float(nv.nvmlDeviceGetPowerUsage(self._h))
                except Exception as exc:
                    self.error = repr(exc)
                    return
                inst = self._instant()
                self.samples.append((t, mj, mw, inst))
                fh.write(json.dumps({"t": t, "mj": mj, "mw": mw, "inst_mw": inst}) + "\n")
                next_at += self._period
                self._stop.wait(max(0.0, next_at - time.monotonic()))

    def close(self) -> None:
        self._stop.set()
        if self._nvml is not None:
            self._thread.join(timeout=2)

    def over(self, t0: float, t1: float) -> dict[str, Any] | None:
        """Joules over [t0, t1] (wall) from the counter and from power x time."""
        s = [x for x in self.samples if t0 - 1.0 <= x[0] <= t1 + 1.0]
        inside = [x for x in s if t0 <= x[0] <= t1]
        if len(inside) < 2:
            return None

        def at(t: float, i: int) -> float | None:
            # Linear between the samples around t; the counter and power both.
            before = [x for x in s if x[0] <= t and x[i] is not None]
            after = [x for x in s if x[0] >= t and x[i] is not None]
            if not before or not after:
                return None
            a, b = before[-1], after[0]
            if b[0] == a[0]:
                return a[i]
            return a[i] + (b[i] - a[i]) * (t - a[0]) / (b[0] - a[0])

        def integral(i: int) -> float | None:
            pts = [(t0, at(t0, i))] + [(x[0], x[i]) for x in inside] + [(t1, at(t1, i))]
            if any(v is None for _, v in pts):
                return None
            return sum((b[0] - a[0]) * (a[1] + b[1]) / 2 for a, b in zip(pts, pts[1:])) / 1e3

        e0, e1 = at(t0, 1), at(t1, 1)
        counter = None if e0 is None or e1 is None else (e1 - e0) / 1e3
        power = integral(2)
        instant = integral(3)
        dt = t1 - t0
        out: dict[str, Any] = {
            "seconds": round(dt, 3),
            "samples": len(inside),
            "joules_counter": None if counter is None else round(counter, 2),
            "joules_power": None if power is None else round(power, 2),
            "joules_instant": None if instant is None else round(instant, 2),
            "power_w_mean": None if counter is None else round(counter / dt, 2),
        }
        if counter and power:
            out["power_vs_counter"] = round(power / counter - 1.0, 4)
        if counter and instant:
            out["instant_vs_counter"] = round(instant / counter - 1.0, 4)
        return out


# -- the server ---------------------------------------------------------------------------


class Server:
    def __init__(self, binary: str, model: str, parallel: int, slot_ctx: int, log: Path) -> None:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.parallel = parallel
        self.cmd = [
            binary, "-m", model, "--host", "127.0.0.1", "--port", str(self.port),
            "--parallel", str(parallel), "--ctx-size", str(parallel * slot_ctx),
            "--metrics", "--no-webui", "-ngl", "999",
        ]  # fmt: skip
        self._log = log.open("wb")
        self.proc = subprocess.Popen(self.cmd, stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 180
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama-server exited {self.proc.returncode}: see {log}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("llama-server not healthy after 180 s")
            time.sleep(0.25)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def metrics(self) -> dict[str, float]:
        with urllib.request.urlopen(self.url + "/metrics", timeout=10) as r:
            text = r.read().decode()
        out = {}
        for line in text.splitlines():
            if line.startswith("llamacpp:"):
                name, _, value = line.partition(" ")
                out[name] = float(value)
        return out

    def tokenize(self, text: str) -> int:
        body = json.dumps({"content": text}).encode()
        req = urllib.request.Request(
            self.url + "/tokenize", data=body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=30) as r:
            return len(json.loads(r.read())["tokens"])

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log.close()


# -- load ---------------------------------------------------------------------------------


def _stream(
    port: int, prompt: str, max_tokens: int, stop: threading.Event, cache: bool = True
) -> int:
    """One streaming completion; hangs up once stopped (llama-server then cancels it).

    ``cache=False`` asks llama.cpp not to reuse a slot's cached prompt (cache_prompt)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    req: dict[str, Any] = {
        "prompt": prompt, "max_tokens": max_tokens, "stream": True, "ignore_eos": True
    }  # fmt: skip
    if not cache:
        req["cache_prompt"] = False
    body = json.dumps(req)
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:200]!r}")
    n = 0
    while not stop.is_set():
        chunk = resp.read1(65536)
        if not chunk:
            break
        n += chunk.count(b"data: ")
    conn.close()
    return n


@contextmanager
def load(
    port: int,
    streams: int,
    prompt: str | Callable[[], str],
    max_tokens: int,
    cache: bool = True,
) -> Iterator[dict[str, int]]:
    """``streams`` clients, each sending one streaming request after another until the end.

    ``prompt`` may be a function: a fresh prompt for every request."""
    stop = threading.Event()
    stats = {"requests": 0, "errors": 0}

    def client() -> None:
        while not stop.is_set():
            try:
                text = prompt() if callable(prompt) else prompt
                _stream(port, text, max_tokens, stop, cache)
                stats["requests"] += 1
            except Exception as exc:
                stats["errors"] += 1
                log(f"client error: {exc!r}")
                stop.wait(0.5)

    threads = [threading.Thread(target=client, daemon=True) for _ in range(streams)]
    for t in threads:
        t.start()
    try:
        yield stats
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)


def wait_for(server: Server, running: int, timeout: float = 30.0) -> dict[str, float]:
    """Until the engine runs ``running`` requests (llama.cpp's gauge), or the timeout."""
    end = time.monotonic() + timeout
    m = server.metrics()
    while time.monotonic() < end:
        m = server.metrics()
        if m.get("llamacpp:requests_processing", 0) >= running:
            break
        time.sleep(0.2)
    return m


# -- headroom's readings ------------------------------------------------------------------


def record(server: Server, path: Path, seconds: float, interval: float = 1.0) -> dict[str, Any]:
    """A recording of the case, as `headroom watch --record` writes one: sampler, window, diagnosis."""
    from recorded import record_report, window_s

    from monitor.sources.build import build_sources

    sources, notes = build_sources(vllm_urls=[server.url], host_pids=[server.pid])
    header = {
        "mode": "local",
        "interval_s": interval,
        "window_s": window_s(interval),
        "notes": notes,
    }
    report = record_report(sources, path, seconds, interval, header, notes)
    return {
        "notes": notes,
        "verdicts": [(v["cause"], v["scope"], v["confidence"]) for v in report.get("verdicts", [])],
    }


def snapshot(server: Server, out: Path, window: float, *extra: str) -> dict[str, Any]:
    proc = subprocess.run(
        [
            sys.executable, "-m", "headroom", "snapshot", "--json", "--window", str(window),
            "--vllm", server.url, "--pid", str(server.pid), *extra,
        ],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )  # fmt: skip
    out.write_text(proc.stdout)
    if proc.returncode != 0 or not proc.stdout.strip():
        log(f"snapshot rc={proc.returncode}: {proc.stderr.strip()[-800:]}")
        return {"error": proc.stderr.strip()[-800:]}
    return json.loads(proc.stdout)


def brief(snap: dict[str, Any]) -> dict[str, Any]:
    """The figures a reader checks a verdict by."""
    if "error" in snap:
        return snap
    gpus = snap.get("gpus") or [{}]
    g = gpus[0]
    engines = snap.get("engines") or [{}]
    e = engines[0]
    keys = ("util", "sm_active", "sm_occupancy", "tensor_active", "dram_active", "power_w")
    return {
        "gpu": {k: g.get(k) for k in keys},
        "engine": {
            k: e.get(k)
            for k in (
                "flavour",
                "running",
                "running_max",
                "waiting",
                "generation_tokens_per_s",
                "prompt_tokens_per_s",
                "kv_cache_usage",
            )
        },  # fmt: skip
        "seq_cap": (e.get("analysis") or {}).get("seq_cap"),
        "headroom": e.get("headroom"),
        "verdicts": [
            {k: v.get(k) for k in ("cause", "scope", "confidence", "summary", "fix", "evidence")}
            for v in snap.get("verdicts", [])
        ],
    }


# -- the run ------------------------------------------------------------------------------


class Run:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.out: Path = args.out
        (self.out / "recordings").mkdir(parents=True, exist_ok=True)
        self.energy = Energy(self.out / "energy.jsonl")
        if self.energy.error:
            log(self.energy.error)
        self.summary: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}}
        self.server = Server(
            args.server, args.model, args.parallel, args.slot_ctx, self.out / "server.log"
        )
        log(f"server up on {self.server.url} (pid {self.server.pid}, --parallel {args.parallel})")
        self.long_prompt = " ".join(WORDS * (args.long_words // len(WORDS)))

    def save(self) -> None:
        (self.out / "summary.json").write_text(json.dumps(self.summary, indent=1, default=str))
        dest: Path = self.args.tar or self.out.with_suffix(".tar.gz")
        tmp = dest.with_suffix(".tmp")
        with tarfile.open(tmp, "w:gz") as tar:
            tar.add(self.out, arcname=self.out.name)
        tmp.replace(dest)

    def tokens(self) -> tuple[float, float]:
        m = self.server.metrics()
        return m.get("llamacpp:tokens_predicted_total", 0.0), m.get(
            "llamacpp:prompt_tokens_total", 0.0
        )

    def measured(self, name: str, record_s: float, snap_window: float, *extra: str) -> None:
        """Record, then snapshot, the load running now; energy and tokens over both."""
        t0 = time.time()
        g0, p0 = self.tokens()
        rec = record(self.server, self.out / "recordings" / f"{name}.jsonl", record_s)
        snap = snapshot(self.server, self.out / f"snapshot-{name}.json", snap_window, *extra)
        t1 = time.time()
        g1, p1 = self.tokens()
        time.sleep(0.5)  # a power sample after t1, to interpolate the counter at t1
        energy = self.energy.over(t0, t1)
        gen, prompt = g1 - g0, p1 - p0
        res: dict[str, Any] = {
            "seconds": round(t1 - t0, 2),
            "generated_tokens": gen,
            "prompt_tokens": prompt,
            "generated_tokens_per_s": round(gen / (t1 - t0), 1),
            "prompt_tokens_per_s": round(prompt / (t1 - t0), 1),
            "recording": rec,
            "snapshot": brief(snap),
            "energy": energy,
        }
        if energy and energy.get("joules_counter") and gen:
            res["joules_per_generated_token"] = round(energy["joules_counter"] / gen, 5)
            res["joules_per_token_all"] = round(energy["joules_counter"] / (gen + prompt), 5)
        self.summary.setdefault("cases", {})[name] = res
        top = (res["snapshot"].get("verdicts") or [{}])[0]
        log(
            f"{name}: recording {rec['verdicts'][:2]}; snapshot {top.get('cause')} "
            f"{top.get('scope')} {top.get('confidence')}; gen {res['generated_tokens_per_s']} tok/s, "
            f"prompt {res['prompt_tokens_per_s']} tok/s; energy {energy}"
        )
        log(f"{name}: gpu {res['snapshot'].get('gpu')} engine {res['snapshot'].get('engine')}")

    def case_smoke(self) -> None:
        stop = threading.Event()
        t0 = time.monotonic()
        n = _stream(self.server.port, "the and of", 64, stop)
        dt = time.monotonic() - t0
        words = self.server.tokenize(self.long_prompt)
        self.summary["smoke"] = {
            "chunks": n,
            "seconds": round(dt, 3),
            "long_prompt_tokens": words,
            "metrics": self.server.metrics(),
        }
        log(f"smoke: 64 tokens in {dt:.2f} s ({n} chunks); long prompt = {words} tokens")

    def case_decode(self) -> None:
        with load(self.server.port, 1, "the and of", 1500) as stats:
            wait_for(self.server, 1)
            time.sleep(2)
            self.measured("decode", self.args.record_s, 4)
        self.summary["cases"]["decode"]["client"] = dict(stats)

    def case_slots(self) -> None:
        n = self.args.parallel
        with load(self.server.port, 2 * n, "the and of", 1500) as stats:
            wait_for(self.server, n)
            time.sleep(2)
            self.measured("slots", self.args.record_s, 4)
        self.summary["cases"]["slots"]["client"] = dict(stats)

    def case_long(self) -> None:
        # A fresh prompt each time, and no prompt cache: every request's prompt is computed.
        n = self.args.parallel
        rng = random.Random(0)
        lock = threading.Lock()

        def fresh() -> str:
            with lock:
                return " ".join(rng.choices(WORDS, k=self.args.long_words))

        with load(self.server.port, n, fresh, 4, cache=False) as stats:
            time.sleep(3)
            self.measured("long", self.args.record_s, 4)
        self.summary["cases"]["long"]["client"] = dict(stats)

    def case_longcached(self) -> None:
        # The same long prompt every time, llama.cpp's prompt cache on (its default).
        n = self.args.parallel
        with load(self.server.port, n, self.long_prompt, 4) as stats:
            time.sleep(3)
            self.measured("longcached", self.args.record_s, 4)
        self.summary["cases"]["longcached"]["client"] = dict(stats)

    def case_lowload(self) -> None:
        # The sweep's request shape at one stream: the headroom figure to hold against its knee.
        prompt = " ".join(WORDS * (self.args.sweep_input // len(WORDS)))
        with load(self.server.port, 1, prompt, self.args.sweep_output) as stats:
            time.sleep(3)
            self.measured("lowload", 8, 5)
        self.summary["cases"]["lowload"]["client"] = dict(stats)

    def case_lowcap(self) -> None:
        # lowload again, told the slot count as a user who knows --parallel would tell it.
        prompt = " ".join(WORDS * (self.args.sweep_input // len(WORDS)))
        with load(self.server.port, 1, prompt, self.args.sweep_output) as stats:
            time.sleep(3)
            self.measured("lowcap", 8, 5, "--max-num-seqs", str(self.args.parallel))
        self.summary["cases"]["lowcap"]["client"] = dict(stats)

    def case_sweep(self) -> None:
        out = self.out / "sweep"
        cmd = [
            sys.executable, "-m", "headroom", "sweep", "--target", self.server.url,
            "--concurrency", self.args.sweep_concurrency,
            "--step-seconds", str(self.args.step_s), "--warmup-seconds", str(self.args.warmup_s),
            "--input-tokens", str(self.args.sweep_input),
            "--output-tokens", str(self.args.sweep_output),
            "--nvml", "--quiet", "--out", str(out),
        ]  # fmt: skip
        t0 = time.time()
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=600)
        (self.out / "sweep.stdout.txt").write_text(proc.stdout + "\n--- stderr\n" + proc.stderr)
        log(f"sweep rc={proc.returncode} in {time.time() - t0:.0f} s")
        if proc.returncode != 0:
            log(proc.stderr[-2000:])
        result = json.loads((out / "sweep.json").read_text())
        steps = []
        for s in result["steps"]:
            e = self.energy.over(s["hold_start"], s["hold_end"])
            tokens = s["output_tokens_per_s"] * s["duration_s"]
            row = {
                k: s.get(k)
                for k in (
                    "concurrency", "requests_per_s", "output_tokens_per_s", "ttft_p50_s",
                    "itl_p50_s", "e2e_mean_s", "running_mean", "running_max", "waiting_mean",
                    "client_in_flight_mean", "engine_in_flight_mean", "littles_law_in_flight",
                    "littles_law_deviation", "littles_law_ok", "verdict",
                    "verdict_confidence", "headroom", "gpu", "valid",
                )
            }  # fmt: skip
            row["energy"] = e
            if e and e.get("joules_counter") and tokens:
                row["joules_per_output_token"] = round(e["joules_counter"] / tokens, 5)
            steps.append(row)
            log(
                f"step c={row['concurrency']}: {row['output_tokens_per_s']:.0f} tok/s, "
                f"{row['requests_per_s']:.2f} req/s, running {row['running_mean']}, "
                f"waiting {row['waiting_mean']}, L {row['client_in_flight_mean']} / "
                f"{row['littles_law_in_flight']} ok={row['littles_law_ok']}, "
                f"{row['verdict']}; J/tok {row.get('joules_per_output_token')}, "
                f"W {e and e.get('power_w_mean')}, power/counter {e and e.get('power_vs_counter')}"
            )
        self.summary["sweep"] = {
            "saturation": result.get("saturation"),
            "headroom_check": result.get("headroom_check"),
            "steps": steps,
        }
        log(f"sweep saturation: {result.get('saturation')}")
        log(f"sweep headroom check: {result.get('headroom_check')}")

    def go(self, cases: list[str], deadline: float) -> None:
        try:
            for name in cases:
                left = deadline - time.time()
                if left < NEEDS_S[name]:
                    log(f"{name}: skipped ({left:.0f} s left, needs ~{NEEDS_S[name]})")
                    self.summary.setdefault("skipped", []).append(name)
                    continue
                log(f"--- {name}")
                try:
                    getattr(self, f"case_{name}")()
                except Exception as exc:  # one broken case must not cost the others
                    log(f"{name} failed: {exc!r}")
                    self.summary.setdefault("failed", {})[name] = repr(exc)
                self.save()
        finally:
            self.server.stop()
            self.energy.close()
            self.save()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--server", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--cases", default=",".join(CASES))
    p.add_argument("--parallel", type=int, default=8)
    p.add_argument("--slot-ctx", type=int, default=4096)
    p.add_argument("--long-words", type=int, default=2000)
    p.add_argument("--record-s", type=float, default=10.0)
    p.add_argument("--sweep-concurrency", default="1,2,4,8,16,32")
    p.add_argument("--sweep-input", type=int, default=256)
    p.add_argument("--sweep-output", type=int, default=256)
    p.add_argument("--step-s", type=float, default=12.0)
    p.add_argument("--warmup-s", type=float, default=3.0)
    p.add_argument("--tar", type=Path, default=None, help="where to pack DIR (default DIR.tar.gz)")
    p.add_argument("--deadline", type=float, default=0.0, help="epoch seconds; 0: none")
    args = p.parse_args()
    cases = [c for c in args.cases.split(",") if c]
    unknown = set(cases) - set(CASES)
    if unknown:
        sys.exit(f"unknown cases: {sorted(unknown)}")
    deadline = args.deadline or time.time() + 3600
    Run(args).go(cases, deadline)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
