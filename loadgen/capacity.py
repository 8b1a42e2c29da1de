"""Capacity for a target rate, from a finished sweep: how many boxes of this config it takes.

A box's goodput is the most requests/s one step completed while meeting every SLO (with no
SLO: within the error threshold): measured, not modelled, unlike ``monitor.diagnosis.capacity`` which
reads it off one window. The boxes are the target over that rate, grown by the margin a
fleet keeps for bursts and a lost box, rounded up.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from loadgen.analysis import effective_steps, load_of, meets
from loadgen.schema import Capacity, Saturation, StepResult

DEFAULT_MARGIN = 0.2


def sweep_capacity(
    steps: Sequence[StepResult],
    slos: dict[str, float],
    error_threshold: float,
    target_rps: float,
    margin: float = DEFAULT_MARGIN,
) -> Capacity:
    good = [s for s in effective_steps(steps) if meets(s, slos, error_threshold)]
    which = "every SLO" if slos else "the error threshold"
    if not good:
        return Capacity(target_rps=target_rps, margin=margin, basis=f"no step met {which}")
    best = max(good, key=lambda s: (s.requests_per_s, -load_of(s)))
    if best.requests_per_s <= 0:
        return Capacity(target_rps=target_rps, margin=margin,
                        basis=f"no step that met {which} completed a request")  # fmt: skip
    unit = "concurrency" if best.concurrency is not None and best.rate is None else "rate"
    basis = (
        f"step {best.index} ({unit} {load_of(best):g}): the highest throughput meeting {which}"
        + ("" if slos else " (no --slo: throughput bounds it, not latency)")
    )
    return Capacity(
        target_rps=target_rps,
        goodput_rps_per_box=round(best.requests_per_s, 4),
        margin=margin,
        # The 1e-9 keeps a quotient that is whole but for float error from a box too many.
        boxes=math.ceil(target_rps / best.requests_per_s * (1.0 + margin) - 1e-9),
        basis=basis,
        step_index=best.index,
    )


def capacity_line(c: Capacity) -> str:
    """ "capacity: 5 boxes of this config for 20 req/s (4.1 req/s each at step 6 ...; +20%)"."""
    if c.boxes is None or c.goodput_rps_per_box is None:
        return f"capacity for {c.target_rps:g} req/s: unknown ({c.basis})"
    return (
        f"capacity: {c.boxes} box{'es' if c.boxes != 1 else ''} of this config for "
        f"{c.target_rps:g} req/s ({c.goodput_rps_per_box:.3g} req/s each, {c.basis}; "
        f"margin {100 * c.margin:.0f}%)"
    )


def saturation_energy(steps: Sequence[StepResult], sat: Saturation) -> Saturation:
    """The saturation point with its step's energy per token and cost per million tokens."""
    at = next((s for s in steps if s.index == sat.step_index), None)
    if at is None:
        return sat
    return sat.model_copy(
        update={
            "energy_per_token_joules": at.energy_per_token_joules,
            "cost_per_million_tokens": at.cost_per_million_tokens,
        }
    )


def energy_line(sat: Saturation) -> str | None:
    """ "at saturation: 0.364 J/token, $1.23 per million tokens"; None without a reading."""
    if sat.energy_per_token_joules is None:
        return None
    text = f"at saturation: {sat.energy_per_token_joules:.3g} J/token"
    if sat.cost_per_million_tokens is not None:
        text += f", ${sat.cost_per_million_tokens:,.2f} per million tokens"
    return text
