"""A recording of the real simulator, replayed through a fresh pipeline, gives the live reports."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from monitor.read.recording import _json_safe, read_recording
from monitor.read.sampler import Sampler
from monitor.sources.dcgm_exporter import DcgmExporterSource
from monitor.sources.host import HostSource
from monitor.sources.vllm import VllmSource
from monitor.tui.feeds import LocalFeed, ReplayFeed
from monitor.watch.pipeline import Monitor
from simulator import start_sim

TICKS = 12


def plain(report: Any) -> Any:
    return json.loads(json.dumps(_json_safe(report)))


def test_replay_reproduces_the_live_verdicts_of_the_simulator(tmp_path: Path) -> None:
    path = tmp_path / "live.jsonl"
    with start_sim(scenario="seq-cap", port=0, load=True) as sim:
        sources = [
            VllmSource(sim.metrics_url),
            DcgmExporterSource(sim.gpu_metrics_url),
            HostSource(pids=(sim.pid,)),
        ]
        sampler = Sampler(sources, interval=0.5)
        feed = LocalFeed(Monitor(sampler, window_s=3.0), header={"scenario": "seq-cap"})
        rec = feed.start_recording(path)
        sampler.start()
        deadline = time.monotonic() + 120
        while rec.lines < TICKS and time.monotonic() < deadline:
            time.sleep(0.1)
        feed.close()
    live = read_recording(path)
    assert len(live.ticks) >= TICKS
    replay = ReplayFeed(path, speed=0)
    replayed = []
    while (frame := replay.step()) is not None:
        replayed.append(plain(frame.report))
    replay.close()
    recorded = [plain(t.report) for t in live.ticks]
    assert [[v["cause"] for v in r["verdicts"]] for r in replayed] == [
        [v["cause"] for v in r["verdicts"]] for r in recorded
    ]
    # Not only the causes: every figure, confidence and `since` comes back the same.
    assert replayed == recorded
    # And the simulator's story was told: requests queued at the sequence cap.
    assert any(v["cause"] == "seq-cap" for v in recorded[-1]["verdicts"])
