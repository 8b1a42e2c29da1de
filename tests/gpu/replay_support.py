"""Replaying a GPU recording through today's sampler, window and diagnosis."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from monitor.diagnosis import Diagnoser
from monitor.read.recording import read_recording
from monitor.read.sampler import Sampler
from monitor.watch.pipeline import Monitor

# The idle part of the bill the idle and starved verdicts end with since issue 31 ("The GPUs
# draw 82 W held idle (0.30 MJ an hour)."): recordings made before it lack the sentence.
_BILL = re.compile(
    r" (The GPUs|GPU \d+) draws? \d+ W( held idle)? \([\d.]+ MJ an hour[^)]*\)[^()]*?\."
    r"(?=( \(held: [^()]*\))?$)"
)


def without_bill(summary: str) -> str:
    """A verdict's summary as recordings made before the idle bill was said have it."""
    return _BILL.sub("", summary)


def replay_reports(path: Path, interval: float) -> tuple[dict[str, Any], ...]:
    """One report per recorded tick, recomputed by a fresh Sampler + Monitor + Diagnoser
    with the recorder's window, max(2 s, 5 ticks)."""
    recording = read_recording(path)
    sampler = Sampler([], interval=interval, capacity=100_000)
    monitor = Monitor(sampler, Diagnoser(), window_s=max(2.0, 5 * interval))
    reports = []
    for tick in recording.ticks:
        assert tick.snapshot is not None
        sampler.push(tick.snapshot)
        report = monitor.report()
        # The sampler logs and swallows a failing listener: a stale report would hide it.
        assert report is not None and report["time"] == tick.snapshot.wall
        reports.append(report)
    sampler.close()
    return tuple(reports)
