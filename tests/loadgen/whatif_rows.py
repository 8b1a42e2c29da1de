"""A what-if's proposed change as the engine view writes it into a sweep's step, for the tune's
tests on hand-made sweeps."""

from __future__ import annotations

from typing import Any


def change(knob: str, current: float, proposed: float, gain: float, limit: str) -> dict[str, Any]:
    """The knob from current to proposed, predicted to buy gain until the limit named binds."""
    return {
        "knob": knob,
        "current": current,
        "proposed": proposed,
        "predicted": {"gain": gain, "limit": limit},
    }
