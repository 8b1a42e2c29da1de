"""Sample for a fixed time and write a recording, as `headroom watch --record` does.

The GPU runners (run_suite.py, run_multi.py, llamacpp_h200.py) import it from their own folder.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def record_report(
    sources: Sequence[Any],
    path: Path,
    seconds: float,
    interval: float,
    header: Mapping[str, Any] | None = None,
    notes: Sequence[str] = (),
) -> dict[str, Any]:
    """Sample ``sources`` for ``seconds``, diagnose a window of 5 intervals (2 s at least),
    write every reading with its report to ``path``; return the last report ({} if none)."""
    from monitor.diagnosis import Diagnoser
    from monitor.read.recording import Recorder
    from monitor.read.sampler import Sampler
    from monitor.watch.pipeline import Monitor

    sampler = Sampler(sources, interval=interval, capacity=10_000)
    monitor = Monitor(sampler, Diagnoser(), window_s=window_s(interval), notes=tuple(notes))
    recorder = Recorder(path, header)
    sampler.subscribe(lambda snap: recorder.write(snap, monitor.report()))
    try:
        sampler.run(duration=seconds)
    finally:
        sampler.close()
        recorder.close()
    return monitor.report() or {}


def window_s(interval: float) -> float:
    return max(2.0, 5 * interval)
