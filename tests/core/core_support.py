"""Readings for the Monitor's tests: one engine's counters at a time."""

from __future__ import annotations

from typing import Any

from monitor.sources.samples import EngineSample, Snapshot


def engine_snapshot(t: float, done: float, running: float, **fields: Any) -> Snapshot:
    """A reading at ``t`` of one engine that has finished ``done`` requests so far; ``fields``
    are the engine's other readings (waiting defaults to 0)."""
    fields.setdefault("waiting", 0.0)
    fields.setdefault("model_name", "m")
    e = EngineSample(
        url="http://127.0.0.1:1/metrics",
        engine="0",
        running=running,
        request_success_total=done,
        **fields,
    )
    return Snapshot(t=t, wall=1_800_000_000.0 + t, engines=(e,))
