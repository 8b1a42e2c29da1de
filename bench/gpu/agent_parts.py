"""Where an agent's CPU goes at 1 s ticks: each part's thread CPU inside a running agent.

An agent with NVML + GPM, the host source and one advancing vLLM page (bench/agent_fault_soak's
Page, served by a process whose child runs the bf16 matmul loop), its /metrics scraped every
5 s. Each part's time.thread_time is summed by wrapping it (which adds a little); the
whole-process figures are bench/agent_process_cost.py's. Parts nest: the sampler's tick holds
the sources it reads in its own thread and the window and diagnosis after them.

    python bench/gpu/agent_parts.py --seconds 60 > bench/results/agent_parts_h200.txt
    python bench/gpu/agent_parts.py --no-nvml --workload none   # a machine without a GPU
"""

from __future__ import annotations

import argparse
import functools
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import prometheus_client.exposition as text_exposition  # noqa: E402
import prometheus_client.openmetrics.exposition as om_exposition  # noqa: E402

from monitor.diagnosis import hysteresis  # noqa: E402
from monitor.read import sampler  # noqa: E402
from monitor.serve import agent as agent_module  # noqa: E402
from monitor.serve.agent import Agent, build_agent_sources  # noqa: E402
from monitor.serve.config import AgentConfig  # noqa: E402
from monitor.sources import host, nvml, promtext, vllm  # noqa: E402
from monitor.watch import pipeline  # noqa: E402
from monitor.window import live as window_live  # noqa: E402

spent: Counter[str] = Counter()
called: Counter[str] = Counter()


def wrap(owner: Any, name: str, label: str) -> None:
    inner: Callable[..., Any] = getattr(owner, name)

    @functools.wraps(inner)
    def timed(*args: Any, **kwargs: Any) -> Any:
        t = time.thread_time()
        try:
            return inner(*args, **kwargs)
        finally:
            spent[label] += time.thread_time() - t
            called[label] += 1

    setattr(owner, name, timed)


PARTS = [
    (sampler.Sampler, "tick", "sampler tick (all below but HTTP)"),
    (sampler.Sampler, "_tick_later", "sampler tick: the reads (digest_every_s)"),
    (sampler.Sampler, "flush", "digest: pages, window, diagnosis"),
    (vllm.VllmSource, "read", "engine page: read"),
    (promtext.Scraper, "get", "engine page: GET"),
    (vllm, "engines_from_text", "engine page: parse"),
    (nvml.NvmlSource, "read", "nvml: read"),
    (nvml.NvmlSource, "_read_hot", "nvml: point fields"),
    (nvml.NvmlSource, "_read_gpm", "nvml: GPM"),
    (nvml.NvmlSource, "_read_processes", "nvml: processes"),
    (host.HostSource, "read", "host: read"),
    (pipeline.Monitor, "_on_snapshot", "window + diagnosis"),
    (window_live.LiveWindow, "push", "window: push"),
    (window_live.LiveWindow, "stats", "window: figures"),
    (hysteresis.Diagnoser, "update", "diagnosis"),
    (agent_module._Handler, "do_GET", "HTTP GET (scrapes)"),
    (text_exposition, "generate_latest", "exposition (text)"),
    (om_exposition, "generate_latest", "exposition (OpenMetrics)"),
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--no-nvml", action="store_true", help="no GPU here")
    ap.add_argument("--workload", choices=("matmul", "none"), default="matmul")
    args = ap.parse_args()
    seconds, interval = args.seconds, args.interval
    for owner, name, label in PARTS:
        wrap(owner, name, label)
    port = 18131
    busy = (
        f"subprocess.run([sys.executable, {str(ROOT / 'bench/gpu/workloads.py')!r}, "
        f"'matmul', '--seconds', '{seconds + 40}'])\n"
        if args.workload == "matmul"
        else f"time.sleep({seconds + 40})\n"
    )
    engine = subprocess.Popen(
        [sys.executable, "-c", (
            f"import sys, time, subprocess; sys.path.insert(0, {str(ROOT)!r})\n"
            "from bench.agent_fault_soak import Page, PageServer\n"
            "s = PageServer(Page(churn=False), time.monotonic()); s.stop()\n"
            f"s.port = {port}; s.start()\n" + busy
        )],
    )  # fmt: skip
    try:
        time.sleep(6)
        config = AgentConfig(
            listen="127.0.0.1:0",
            vllm=(f"http://127.0.0.1:{port}/metrics",),
            interval=interval,
            nvml=not args.no_nvml,
        )
        sources, notes = build_agent_sources(config)
        agent = Agent(config, sources=sources, notes=notes)
        agent.start()
        time.sleep(10)
        spent.clear()
        called.clear()
        c0, w0, scrapes = time.process_time(), time.monotonic(), 0
        while time.monotonic() - w0 < seconds:
            time.sleep(5)
            urllib.request.urlopen(agent.url + "/metrics").read()
            scrapes += 1
        cpu, wall = time.process_time() - c0, time.monotonic() - w0
        agent.stop()
    finally:
        engine.kill()
    print(f"# sources: {[type(s).__name__ for s in sources]}; interval {interval} s, {wall:.0f} s")
    print(f"process: {cpu / wall * 100:.3f}% of a core ({cpu / wall * 1e3:.2f} ms/s), "
          f"{scrapes} scrapes")  # fmt: skip
    for label, t in sorted(spent.items(), key=lambda kv: -kv[1]):
        print(f"  {label:36s} {t / wall * 1e3:7.3f} ms/s  {called[label]:6d} calls  "
              f"{t / called[label] * 1e3:.3f} ms a call")  # fmt: skip


if __name__ == "__main__":
    main()
