"""Soak with faults: memory, tick pace, health and counters while the engine misbehaves.

The agent runs as its own process (interval 1 s, window 10 s) against a vLLM page served
here (the vLLM 0.32 capture, counters advancing with time) whose label sets churn: the
model name changes every 30 s and a LoRA adapter's every 20 s. Every cycle (10 min):

  - vLLM down for 30 s, then back with its counters reset;
  - the page answering in 3 s, for 60 s;
  - a page of garbage, for 60 s;
  - NVML raising on one tick (a fake GPU source in the agent's process);
  - 50 scrapes at once every 30 s, throughout.

Measured: the agent's RSS every 5 s (least-squares slope after a 10-minute warm-up), tick
lateness against the deadlines (the agent's own sampler, binned), /healthz each second
(what it names stale in each fault), every /metrics counter checked never to go backwards
(per series, on each scrape, 1 s apart), and a recording taken through the agent
(/api/v1/snapshot every 0.5 s): gaps between reports, and spans without engine data
against the faults. The report is rewritten every minute, so a cut run still says what
it saw.

    nohup python bench/agent_fault_soak.py --duration 7200 \\
        --out bench/results/agent_fault_soak.txt &
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.fixture_server import DownableServer, send_page  # noqa: E402

FIXTURE = ROOT / "tests" / "fixtures" / "vllm-0.32.0-cpu-metrics-under-load.txt"
CYCLE_S = 600.0
# Offsets in each cycle (seconds) and lengths of the faults.
DOWN_AT, DOWN_S = 60.0, 30.0
SLOW_AT, SLOW_S = 180.0, 60.0
GARBAGE_AT, GARBAGE_S = 300.0, 60.0
NVML_AT = 420.0
LATE_BOUNDS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


# ---------------------------------------------------------------- the agent's process
class FlakyGpu:
    """One fake GPU; raises on the tick after ``trigger`` appears (and removes it)."""

    name = "nvml"

    def __init__(self, trigger: Path) -> None:
        self.trigger = trigger

    def read(self) -> Any:
        from monitor.sources.base import Reading
        from monitor.sources.samples import GpuSample

        if self.trigger.exists():
            self.trigger.unlink()
            raise RuntimeError("NVML_ERROR_UNKNOWN (injected)")
        return Reading(
            gpus=(
                GpuSample(
                    0, "GPU-soak", "NVIDIA H200", "nvml", util=0.9, sm_active=0.8, power_watts=500.0
                ),
            )  # fmt: skip
        )

    def close(self) -> None:
        pass


def _write_atomically(path: Path, text: str) -> None:
    # The harness reads this file every minute: a reader must never see it half written (a
    # 69-minute soak ended on an empty read).
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def run_agent(port: int, url: str, trigger: Path, late_file: Path) -> None:
    from monitor.serve.agent import Agent, build_agent_sources
    from monitor.serve.config import AgentConfig
    from monitor.serve.malloc_arenas import limit_malloc_arenas

    # As `headroom agent` does before its threads start (MALLOC_ARENA_MAX, if set, wins).
    limit_malloc_arenas()

    config = AgentConfig(listen=f"127.0.0.1:{port}", vllm=(url,), nvml=False)
    sources, notes = build_agent_sources(config)
    agent = Agent(config, sources=[FlakyGpu(trigger), *sources], notes=notes)
    counts = [0] * (len(LATE_BOUNDS) + 1)
    worst = [0.0]

    def on_tick(_snap: Any) -> None:
        late = agent.sampler.lateness_s
        i = 0
        while i < len(LATE_BOUNDS) and late > LATE_BOUNDS[i]:
            i += 1
        counts[i] += 1
        worst[0] = max(worst[0], late)

    agent.sampler.subscribe(on_tick)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    agent.start()
    try:
        while not stop.wait(10.0):
            _write_atomically(late_file, json.dumps({"counts": counts, "worst": worst[0]}))
    finally:
        _write_atomically(late_file, json.dumps({"counts": counts, "worst": worst[0]}))
        agent.stop()


# ---------------------------------------------------------------- the engine's page
class Page:
    """The capture with counters advancing and names churning; faults switched by time."""

    def __init__(self, churn: bool = True) -> None:
        self.churn = churn  # model and LoRA names changing (the soak), or not (a cost bench)
        self.lines: list[tuple[str, float | None]] = []
        for line in FIXTURE.read_text().splitlines():
            if line.startswith("#") or not line.strip():
                self.lines.append((line, None))
                continue
            prefix, _, value = line.rpartition(" ")
            name = prefix.partition("{")[0]
            cumulative = name.endswith(("_total", "_count", "_sum", "_bucket"))
            self.lines.append((prefix, float(value) if cumulative else None))
            if not cumulative:
                self.lines[-1] = (line, None)
        self.epoch = time.monotonic()
        self.mode = "ok"

    def body(self, elapsed: float) -> bytes:
        if self.mode == "garbage":
            return b"\x00garbage{{{ not prometheus\n" * 200 + b"vllm:num_requests_running{ 3\n"
        grown = (time.monotonic() - self.epoch) * 5.0  # +5 per second on every counter
        model = f"tiny-llama-{int(elapsed // 30)}"
        out = []
        for text, base in self.lines:
            if self.churn:
                text = text.replace('model_name="tiny-llama"', f'model_name="{model}"')
            out.append(text if base is None else f"{text} {base + grown}")
        if not self.churn:
            return ("\n".join(out) + "\n").encode()
        out.append("# HELP vllm:lora_requests_info Running stats on lora requests.")
        out.append("# TYPE vllm:lora_requests_info gauge")
        out.append(
            f'vllm:lora_requests_info{{max_lora="4",running_lora_adapters="lora-{int(elapsed // 20)}",'
            f'waiting_lora_adapters=""}} {time.time()}'
        )
        return ("\n".join(out) + "\n").encode()


class PageServer(DownableServer):
    """The page on 127.0.0.1: slow, garbage or down as the faults say."""

    def __init__(self, page: Page, t0: float) -> None:
        self.page = page
        self.t0 = t0
        super().__init__(self._answer)

    def _answer(self, handler: BaseHTTPRequestHandler) -> None:
        if self.page.mode == "slow":
            time.sleep(3.0)
        body = self.page.body(time.monotonic() - self.t0)
        send_page(handler, body, "text/plain; version=0.0.4")


# ---------------------------------------------------------------- the harness
def get(url: str, timeout: float = 10.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


_SERIES = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? (\S+)$")


def counters(text: str) -> dict[str, float]:
    """Every counter-like series (name ending _total, _count, _bucket) by name+labels."""
    out = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        m = _SERIES.match(line)
        if m and m.group(1).endswith(("_total", "_count", "_bucket")):
            out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return out


def fault_at(elapsed: float) -> str:
    c = elapsed % CYCLE_S
    if DOWN_AT <= c < DOWN_AT + DOWN_S:
        return "down"
    if SLOW_AT <= c < SLOW_AT + SLOW_S:
        return "slow"
    if GARBAGE_AT <= c < GARBAGE_AT + GARBAGE_S:
        return "garbage"
    return "ok"


def fault_end(elapsed: float, switches: list[tuple[float, str]]) -> float:
    """When the fault under way at ``elapsed`` ended, by the times the faults were switched
    (``switches``: (elapsed, the state switched to); the loop switches them up to 5 s after
    the schedule); ``elapsed`` itself outside a fault."""
    start = None
    for at, now in switches:
        if at > elapsed:
            return at if start is not None else elapsed
        start = at if now != "ok" else None
    return math.inf if start is not None else elapsed  # still under way


def slope_per_hour(points: list[tuple[float, float]]) -> float:
    n = len(points)
    mx = sum(t for t, _ in points) / n
    my = sum(v for _, v in points) / n
    var = sum((t - mx) ** 2 for t, _ in points) or 1e-9
    return 3600 * sum((t - mx) * (v - my) for t, v in points) / var


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--duration", type=float, default=7200.0)
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/agent_fault_soak.txt")
    ap.add_argument("--agent", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.agent:
        port, url, trigger, late = args.agent
        run_agent(int(port), url, Path(trigger), Path(late))
        return

    t0 = time.monotonic()
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    page = Page()
    server = PageServer(page, t0)
    url = f"http://127.0.0.1:{server.port}/metrics"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    work = Path(f"/tmp/headroom-soak-{os.getpid()}")
    work.mkdir(exist_ok=True)
    trigger, late_file = work / "nvml-raise", work / "late.json"
    agent = subprocess.Popen(
        [sys.executable, __file__, "--agent", str(port), url, str(trigger), str(late_file)],
        cwd=ROOT,
        stderr=open(work / "agent.log", "w"),  # noqa: SIM115
    )
    base = f"http://127.0.0.1:{port}"
    proc = psutil.Process(agent.pid)
    state: dict[str, Any] = {
        "rss": [], "backwards": [], "scrapes": 0, "scrape_fail": 0, "burst_fail": 0,
        "health": {}, "health_codes": {}, "reports": [], "no_engine": [], "nvml_raised": 0,
        "events": [], "switches": [],
    }  # fmt: skip
    stop = threading.Event()

    def scraper() -> None:
        last: dict[str, float] = {}
        while not stop.is_set():
            try:
                code, body = get(base + "/metrics")
                state["scrapes"] += 1
                now = counters(body.decode())
                for k, v in now.items():
                    if k in last and v < last[k] - 1e-9:
                        state["backwards"].append((round(time.monotonic() - t0, 1), k, last[k], v))
                last.update(now)
            except Exception:
                state["scrape_fail"] += 1
            stop.wait(1.0)

    def health() -> None:
        while not stop.is_set():
            el = time.monotonic() - t0
            try:
                code, body = get(base + "/healthz")
                h = json.loads(body)
                fault = fault_at(el)
                names = tuple(sorted(s["source"] for s in h.get("stale_sources", [])))
                key = f"{fault}: {code} stale={list(names)}"
                state["health"][key] = state["health"].get(key, 0) + 1
            except Exception as exc:
                k = f"error {type(exc).__name__}"
                state["health"][k] = state["health"].get(k, 0) + 1
            stop.wait(1.0)

    def recorder() -> None:
        last_time = None
        engine_gap_start = None
        while not stop.is_set():
            el = time.monotonic() - t0
            try:
                code, body = get(base + "/api/v1/snapshot")
                if code == 200:
                    rep = json.loads(body)
                    t = rep.get("time")
                    if t is not None and t != last_time:
                        if last_time is not None and t - last_time > 1.5:
                            state["reports"].append((round(el, 1), round(t - last_time, 2)))
                        last_time = t
                    has_engine = bool(rep.get("engines"))
                    if not has_engine and engine_gap_start is None:
                        engine_gap_start = el
                    elif has_engine and engine_gap_start is not None:
                        state["no_engine"].append(
                            (
                                round(engine_gap_start, 1),
                                round(el - engine_gap_start, 1),
                                fault_at(engine_gap_start),
                            )  # fmt: skip
                        )
                        engine_gap_start = None
            except Exception:
                pass
            stop.wait(0.5)

    def burst() -> None:
        while not stop.wait(30.0):
            with ThreadPoolExecutor(max_workers=50) as pool:
                codes = list(pool.map(lambda _: get(base + "/metrics", 30)[0], range(50)))
            state["burst_fail"] += sum(1 for c in codes if c != 200)

    time.sleep(3.0)
    for fn in (scraper, health, recorder, burst):
        threading.Thread(target=fn, daemon=True).start()

    def report(final: bool) -> None:
        el = time.monotonic() - t0
        late = json.loads(late_file.read_text()) if late_file.exists() else None
        lines = [
            f"agent fault soak: started {started}, {el / 60:.1f} min so far"
            f"{' (final)' if final else ' (running; rewritten every minute)'} of "
            f"{args.duration / 60:.0f} planned",
            f"machine: {platform.node()}, {os.cpu_count()} CPUs (shared with other work), "
            f"python {platform.python_version()}",
            f"command: python bench/agent_fault_soak.py --duration {args.duration:g} --out {args.out}",
            "agent: interval 1 s, window 10 s, host source, one vLLM page (label sets churning), "
            "a fake NVML GPU; faults every 10 min: down 30 s (back with counters reset), "
            "3 s answers 60 s, garbage 60 s, NVML raising one tick; 50 scrapes at once every 30 s",
        ]
        rss = state["rss"]
        warm = [(t, v) for t, v in rss if t >= 600.0]
        if rss:
            lines.append(f"RSS: now {rss[-1][1]:.1f} MiB, max {max(v for _, v in rss):.1f} MiB, "
                         f"min {min(v for _, v in rss):.1f} MiB ({len(rss)} samples every 5 s)")  # fmt: skip
        if len(warm) >= 10:
            lines.append(f"RSS slope after 10 min warm-up: {slope_per_hour(warm):+.2f} MiB/h "
                         f"over {(warm[-1][0] - warm[0][0]) / 60:.0f} min")  # fmt: skip
        if late:
            counts = late["counts"]
            total = sum(counts)
            acc, p99 = 0, None
            for bound, c in zip((*LATE_BOUNDS, float("inf")), counts):
                acc += c
                if p99 is None and acc >= 0.99 * total:
                    p99 = bound
            lines.append(f"tick lateness: {total} ticks, p99 <= {p99} s, worst {late['worst']:.3f} s; "
                         f"bins (upper bound s: ticks) {list(zip((*LATE_BOUNDS, 'inf'), counts))}")  # fmt: skip
        lines.append(f"/metrics scrapes (1 s apart): {state['scrapes']}, failed {state['scrape_fail']}; "
                     f"burst scrapes failed: {state['burst_fail']}")  # fmt: skip
        lines.append(f"counters that went backwards: {len(state['backwards'])} "
                     f"{state['backwards'][:5]}")  # fmt: skip
        lines.append(f"NVML raises injected: {state['nvml_raised']}")
        lines.append("/healthz by fault (fault: code stale_sources -> seconds seen):")
        for k, v in sorted(state["health"].items()):
            lines.append(f"  {k} -> {v}")
        gaps = state["reports"]
        lines.append(
            f"recording through /api/v1/snapshot: report gaps > 1.5 s: {len(gaps)} {gaps[:10]}"
        )
        outside = [g for g in state["no_engine"] if g[2] == "ok" and g[1] > 3.0]
        lines.append(f"spans without engine data: {len(state['no_engine'])}; "
                     f"starting outside a fault and longer than 3 s: {len(outside)} {outside[:10]}")  # fmt: skip
        lines.append(f"  (start s, length s, fault): {state['no_engine'][:12]}")
        # A recording may lose engine data during a fault and until the first read after
        # it: a GET begun just before the switch runs out the 2 s timeout, the next tick
        # asks again (1 s), and this recording looks every 0.5 s: 3.5 s at most.
        switches = state["switches"]
        beyond = [g for g in state["no_engine"] if g[0] + g[1] > fault_end(g[0], switches) + 3.5]
        ends = sorted((g[2], round(g[0] + g[1] - fault_end(g[0], switches), 1))
                      for g in state["no_engine"]
                      if g[2] != "ok" and fault_end(g[0], switches) < math.inf)  # fmt: skip
        lines.append(
            f"  spans that outlast their fault by more than 3.5 s: {len(beyond)} {beyond[:12]}"
        )
        lines.append(f"  how long after its fault each span begun in one ended (s): {ends}")
        lines.append("events: " + "; ".join(state["events"][-30:]))
        args.out.write_text("\n".join(lines) + "\n")

    next_report = 60.0
    fault = "ok"
    nvml_done_cycle = -1
    try:
        while time.monotonic() - t0 < args.duration:
            el = time.monotonic() - t0
            try:
                state["rss"].append((round(el, 1), proc.memory_info().rss / 2**20))
            except psutil.Error:
                state["events"].append(f"{el:.0f}s agent gone")
                break
            now_fault = fault_at(el)
            if now_fault != fault:
                state["events"].append(f"{el:.0f}s {fault}->{now_fault}")
                state["switches"].append((el, now_fault))
                if now_fault == "down":
                    server.stop()
                elif fault == "down":
                    page.epoch = time.monotonic()  # back with its counters reset
                    server.start()
                page.mode = now_fault if now_fault in ("slow", "garbage") else "ok"
                fault = now_fault
            cycle = int(el // CYCLE_S)
            if el % CYCLE_S >= NVML_AT and cycle != nvml_done_cycle:
                trigger.touch()
                state["nvml_raised"] += 1
                nvml_done_cycle = cycle
            if el >= next_report:
                report(False)
                next_report += 60.0
            time.sleep(5.0)
    finally:
        stop.set()
        agent.send_signal(signal.SIGTERM)
        try:
            code = agent.wait(timeout=30)
        except subprocess.TimeoutExpired:
            agent.kill()
            code = -9
        state["events"].append(f"agent exit code after SIGTERM: {code}")
        report(True)
        server.stop()


if __name__ == "__main__":
    main()
