"""Capacity for a target rate, from one window: how many boxes of this config it takes.

A box's rate is what its engines complete at their first limit (the headroom figure's
``rate_at_limit_rps``, summed over its engines). With SLOs, a latency that would pass its
bound before the limit sets a lower rate: each latency at the limit is today's without the
queue (a box below its limit queues nothing) grown by the longer steps (the figure's
``latency_growth``), and the rate where it meets its bound is read on the straight line from
today's rate and latency to the limit's. The boxes are the target over the rate a box
sustains, rounded up; the margin is what they hold past the target.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from monitor.core.errors import ConfigError

# The quantiles a window reads (histogram deltas): an SLO at another is refused.
_WINDOW_SLOS = {
    "ttft_p50_s": "ttft_p50_s",
    "ttft_p95_s": "ttft_p95_s",
    "itl_p50_s": "itl_p50_s",
    "itl_p95_s": "itl_p95_s",
    "e2e_p50_s": "e2e_p50_s",
    "e2e_p95_s": "e2e_p95_s",
}
# Latencies that include the engine's queue: at or below the limit nothing waits.
_QUEUED = ("ttft", "e2e")


def check_slos(slos: Mapping[str, float]) -> None:
    """One clear error for an SLO a window cannot judge."""
    for name in slos:
        if name not in _WINDOW_SLOS:
            raise ConfigError(
                f"--slo {name.removesuffix('_s')}: a window reads p50 and p95 of ttft, itl "
                "and e2e only"
            )


def _box_rate(
    engine: Mapping[str, Any], slos: Mapping[str, float]
) -> tuple[float | None, str | None, list[str]]:
    """(requests/s this engine sustains, what bounds it, notes); None where unknown."""
    room = engine.get("headroom") or {}
    limit_rate = room.get("rate_at_limit_rps")
    now_rate = engine.get("requests_per_s")
    if limit_rate is None or now_rate is None:
        return None, None, ["no rate at the limit: the window finished no requests"]
    rate, bound, notes = float(limit_rate), str(room.get("limit")), []
    growth = float(room.get("latency_growth") or 1.0)
    queue = float(engine.get("queue_mean_s") or 0.0)
    for name, slo in slos.items():
        now = engine.get(_WINDOW_SLOS[name])
        if now is None:
            notes.append(f"{name.removesuffix('_s')} not read: its SLO not judged")
            continue
        base = max(0.0, now - queue) if name.split("_")[0] in _QUEUED else now
        at_limit = base * growth
        if base > slo:
            return 0.0, name.removesuffix("_s"), notes
        if at_limit > slo:
            # The straight line from today's (rate, latency) to the limit's.
            share = (slo - base) / (at_limit - base)
            r = now_rate + share * (float(limit_rate) - now_rate)
            if r < rate:
                rate, bound = r, name.removesuffix("_s")
    return rate, bound, notes


def capacity(
    report: Mapping[str, Any], target_rps: float, slos: Mapping[str, float] | None = None
) -> dict[str, Any]:
    """How many boxes like this one serve ``target_rps`` (within ``slos``)."""
    slos = dict(slos or {})
    total, bounds, notes = 0.0, [], []
    for e in report.get("engines") or ():
        rate, bound, more = _box_rate(e, slos)
        notes += more
        if rate is None:
            return {"target_rps": target_rps, "boxes": None, "per_box_rps": None,
                    "margin": None, "bound_by": None, "slos": slos, "notes": notes}  # fmt: skip
        total += rate
        bounds.append(bound)
    if not bounds:
        notes.append("no engine read")
    boxes = math.ceil(target_rps / total - 1e-9) if total > 0 else None
    return {
        "target_rps": target_rps,
        "per_box_rps": round(total, 4) if bounds else None,
        "boxes": boxes,
        "margin": None if boxes is None else round(boxes * total / target_rps - 1.0, 4),
        "bound_by": bounds[0] if len(set(bounds)) == 1 else bounds,
        "slos": {k.removesuffix("_s"): v for k, v in slos.items()},
        "notes": notes,
    }


def capacity_text(c: Mapping[str, Any]) -> str:
    """ "capacity: 3 boxes like this for 25 req/s (8.9 req/s each, up to seq-cap; 7% spare)"."""
    if c["boxes"] is None:
        why = (
            f"the {c['bound_by']} SLO is missed at today's load already"
            if c.get("per_box_rps") == 0
            else "; ".join(c["notes"]) or "no rate at the limit"
        )
        return f"capacity for {c['target_rps']:g} req/s: unknown ({why})"
    bound = c["bound_by"] if isinstance(c["bound_by"], str) else ", ".join(c["bound_by"])
    what = "SLO" if f"{bound}_s" in _WINDOW_SLOS else "limit"
    return (
        f"capacity: {c['boxes']} box{'es' if c['boxes'] != 1 else ''} like this for "
        f"{c['target_rps']:g} req/s ({c['per_box_rps']:.3g} req/s each, up to the {bound} "
        f"{what}; {100 * c['margin']:.0f}% spare)"
    )
