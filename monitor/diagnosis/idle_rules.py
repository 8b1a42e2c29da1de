"""Idle: an engine with nothing to do, GPUs doing nothing, a box at rest."""

from __future__ import annotations

from collections.abc import Sequence

from monitor.diagnosis.energy import idle_bill, physical_gpus
from monitor.diagnosis.rule_kit import BOX, Context, ev, make_verdict, pct
from monitor.diagnosis.thresholds import Thresholds
from monitor.diagnosis.verdict import Evidence, Verdict
from monitor.window.scopes import gpu_label, gpu_scope
from monitor.window.stats import EngineWindow, GpuWindow


def engine_idle(e: EngineWindow, th: Thresholds) -> bool:
    if e.running_max is None:
        return False
    return (
        e.running_max < 0.5
        and (e.waiting_max or 0.0) < 0.5
        and (e.requests_per_s is None or e.requests_per_s < th.idle_requests_per_s)
    )


def moving_data(g: GpuWindow, th: Thresholds) -> bool:
    """Host transfers near the link's peak: a GPU waiting on copies is not idle, though no
    kernel runs (GPM's duty cycle counts kernels only)."""
    pcie, peak = g.pcie_bytes_per_s, g.pcie_peak_bytes_per_s
    return pcie is not None and peak is not None and pcie >= th.transfer_share_min * peak


def gpu_idle(g: GpuWindow, th: Thresholds) -> bool:
    return g.util is not None and g.util < th.util_idle and not moving_data(g, th)


def gpus_power(gpus: Sequence[GpuWindow]) -> float | None:
    """What the boards draw together (None: some board's power was not read)."""
    watts = [g.power_watts for g in physical_gpus(gpus)]
    if not watts or any(w is None for w in watts):
        return None
    return sum(w for w in watts if w is not None)


def bill_evidence(watts: float | None, price: float | None, gpus: float) -> list[Evidence]:
    out = [ev("idle_power_watts", watts, unit="W")] if watts is not None else []
    if price is not None:
        out.append(ev("idle_cost_per_hour", price * gpus, unit="$/h"))
    return out


def bill_sentence(what: str, watts: float | None, price: float | None, gpus: float) -> str:
    """The idle part of the bill: " GPU 2 draws 85 W held idle (0.31 MJ an hour; $2.50 an
    hour at $2.50/GPU-hour)." ("" when neither the power nor a price is known)."""
    bill = idle_bill(None, price, gpus)
    if watts is None:
        # No power reading (a MIG instance alone): the money only, where a price is given.
        return f" {what} held idle cost {bill}." if bill else ""
    parts = [f"{watts * 3600 / 1e6:.2f} MJ an hour"] + ([bill] if bill else [])
    verb = "draws" if what.startswith("GPU ") else "draw"
    return f" {what} {verb} {watts:.0f} W held idle ({'; '.join(parts)})."


def box_idle(ctx: Context) -> Verdict | None:
    """Everything read is idle: no requests and no kernels."""
    w, th = ctx.window, ctx.th
    if not w.engines and not ctx.has_gpu:
        return None
    if not all(engine_idle(e, th) for e in w.engines):
        return None
    if not all(gpu_idle(g, th) for g in w.gpus if g.util is not None):
        return None
    evidence: list[Evidence] = []
    for e in w.engines:
        evidence += [
            ev("running_max", e.running_max, 0.5, "<"),
            ev("waiting_max", e.waiting_max, 0.5, "<"),
            ev("requests_per_s", e.requests_per_s, th.idle_requests_per_s, "<", "req/s"),
        ]
    for g in w.gpus:
        evidence.append(ev(f"gpu{gpu_label(g)}_util", g.util, th.util_idle, "<", "ratio"))
    missing: list[str] = []
    conf = 0.95
    if not ctx.has_gpu:
        missing.append("gpu")
        conf = 0.8
    if not w.engines:
        missing.append("engine")
        conf = 0.85
    what = "no requests and no GPU activity"
    if missing:
        what = (
            "no requests (no GPU data)" if "gpu" in missing else "no GPU activity (no engine data)"
        )
    # The idle part of the bill: GPUs held but unused still draw their idle watts.
    boards = len(physical_gpus(w.gpus))
    watts = gpus_power(w.gpus)
    evidence += bill_evidence(watts, ctx.gpu_hour_price, boards) if boards else []
    bill = bill_sentence("The GPUs", watts, ctx.gpu_hour_price, boards) if boards else ""
    return make_verdict(
        "idle", conf, BOX, evidence, "none: nothing to serve", f"Idle: {what}.{bill}", missing
    )


def idle_gpus(ctx: Context) -> list[Verdict]:
    """A GPU with nothing running while the rest of the box works."""
    out = []
    busy_elsewhere = any(not gpu_idle(g, ctx.th) for g in ctx.gpus if g.util is not None) or any(
        not engine_idle(e, ctx.th) for e in ctx.window.engines
    )
    if not busy_elsewhere:
        return out
    for g in ctx.gpus:
        if gpu_idle(g, ctx.th):
            # A MIG instance is not billed apart from its board.
            price = ctx.gpu_hour_price if g.mig_parent is None else None
            out.append(
                make_verdict(
                    "idle",
                    0.7,
                    gpu_scope(g),
                    [
                        ev("util", g.util, ctx.th.util_idle, "<", "ratio"),
                        *bill_evidence(g.power_watts, price, 1),
                    ],
                    f"check that the engine uses GPU {g.index} (CUDA_VISIBLE_DEVICES, "
                    "--tensor-parallel-size, --data-parallel-size)",
                    f"GPU {g.index} is idle ({pct(g.util or 0)} duty cycle) while the box has work."
                    + bill_sentence(f"GPU {g.index}", g.power_watts, price, 1),
                )
            )
    return out
