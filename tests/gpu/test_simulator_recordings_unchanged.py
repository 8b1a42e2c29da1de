"""The GPU-rule refinements leave the simulator's four recorded stories as they were.

tests/fixtures/recordings/ holds real simulator sessions (starved, seq-cap, cpu-bound,
launch-bound: engine, dcgm-exporter GPU and host) with the verdicts live at the time.
Replayed through today's diagnosis, every tick must say the same.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from replay_support import without_bill

from monitor.recording import read_recording
from monitor.tui.feeds import default_replay_monitor

RECORDINGS = Path(__file__).resolve().parent.parent / "fixtures" / "recordings"
STORIES = ("starved", "seq-cap", "cpu-bound", "launch-bound")


@pytest.mark.parametrize("story", STORIES)
def test_simulator_story_verdicts_are_unchanged(story: str) -> None:
    recording = read_recording(RECORDINGS / f"{story}.jsonl")
    assert recording.header.get("diagnosis") is None  # recorded without caps: none to pass on
    # The recorded window, widening as the demo's does where the header says so.
    monitor = default_replay_monitor(recording)
    sampler = monitor.sampler
    tops = []
    for tick in recording.ticks:
        assert tick.snapshot is not None and tick.report is not None
        sampler.push(tick.snapshot)
        report = monitor.report()
        assert report is not None and report["time"] == tick.snapshot.wall
        # The idle bill (issue 31) is said after what the recordings said, which stays.
        now = [(v["cause"], v["scope"], v["confidence"], without_bill(v["summary"]))
               for v in report["verdicts"]]  # fmt: skip
        then = [(v["cause"], v["scope"], v["confidence"], v["summary"]) for v in tick.report["verdicts"]]  # fmt: skip
        assert now == then, (tick.snapshot.t, now, then)
        tops.append(now[0][0])
    sampler.close()
    assert tops[-1] == story
