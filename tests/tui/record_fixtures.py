"""Regenerate tests/fixtures/recordings/<scenario>.jsonl from the real simulator (run on demand).

    .venv/bin/python tests/tui/record_fixtures.py [SCENARIO ...]

Each recording is what `headroom demo --record` writes: the simulator's vLLM
and dcgm-exporter endpoints and this host's view of the simulator process,
sampled every second, diagnosed over a 5 s window that widens by itself (as the
demo's does) when the scenario's requests outlast it.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from headroom.commands.demo import MAX_WINDOW_S
from monitor.read.recording import read_recording
from monitor.read.sampler import Sampler
from monitor.sources.dcgm_exporter import DcgmExporterSource
from monitor.sources.host import HostSource
from monitor.sources.vllm import VllmSource
from monitor.tui.feeds import LocalFeed
from monitor.watch.pipeline import Monitor
from simulator import start_sim

OUT = Path(__file__).resolve().parents[1] / "fixtures" / "recordings"
TICKS = 24
DEFAULT = ("starved", "seq-cap", "cpu-bound", "launch-bound")


def record(scenario: str, ticks: int = TICKS) -> Path:
    path = OUT / f"{scenario}.jsonl"
    path.unlink(missing_ok=True)
    with start_sim(scenario=scenario, port=0, load=True) as sim:
        sources = [
            VllmSource(sim.metrics_url),
            DcgmExporterSource(sim.gpu_metrics_url),
            HostSource(pids=(sim.pid,)),
        ]
        sampler = Sampler(sources, interval=1.0)
        feed = LocalFeed(
            Monitor(sampler, window_s=5.0, max_window_s=MAX_WINDOW_S),
            label="simulator",
            header={"scenario": scenario},
        )
        rec = feed.start_recording(path)
        sampler.start()
        while rec.lines < ticks:
            time.sleep(0.2)
        feed.close()
    return path


def told(path: Path, scenario: str) -> bool:
    """Did the recording tell the scenario's story? (A stalled or loaded machine can spoil one.)"""
    last = read_recording(path).ticks[-1].report or {}
    return any(v["cause"] == scenario for v in last.get("verdicts", ()))


if __name__ == "__main__":
    for name in sys.argv[1:] or DEFAULT:
        for _attempt in range(3):
            p = record(name)
            ok = told(p, name)
            print(p, p.stat().st_size, "ok" if ok else "story not told", flush=True)
            if ok:
                break
