"""Comm-bound: the GPUs of one engine spend a large share of each step in collectives.

Tensor parallelism splits every layer across the engine's GPUs and all-reduces the
activations after it. While an all-reduce runs, the GPU is "busy" (NCCL kernels hold
a few SMs) and its NVLink links carry the data, but the tensor cores wait. So the
signature, read on every busy GPU of the box at once: NVLink traffic high, duty cycle
high, SM and tensor activity moderate to low, and the same on every rank (they wait
on each other at each all-reduce, so they fall in step). A single GPU reads its NVLink
traffic as 0 (or not at all) and never matches.

The window is taken to hold one engine's GPUs (one box, one tensor-parallel group).
"""

from __future__ import annotations

from collections.abc import Sequence

from monitor.diagnosis import figures as fig
from monitor.diagnosis.rule_kit import BOX, Context, ev, make_verdict, pct
from monitor.diagnosis.verdict import Verdict
from monitor.window.stats import GpuWindow

COMM_FIX = (
    "overlap communication with compute (async TP / sequence parallel), use a layout with "
    "less all-reduce traffic (fewer TP ranks, pipeline or data parallel), check the topology "
    "(nvidia-smi topo -m: NVLink, not PCIe, between the ranks)"
)


def nvlink_bytes_per_s(g: GpuWindow) -> float | None:
    """Transmit plus receive; None when neither direction was read."""
    tx, rx = g.nvlink_tx_bytes_per_s, g.nvlink_rx_bytes_per_s
    if tx is None and rx is None:
        return None
    return (tx or 0.0) + (rx or 0.0)


def nvlink_peak(ctx: Context, g: GpuWindow) -> float | None:
    peak = fig.gpu_peak([g], ctx.caps)
    return None if peak is None else peak.nvlink_bytes_per_s


def busy_gpus(ctx: Context) -> list[GpuWindow]:
    """The GPUs doing anything: an idle one is idle_gpus()'s concern, not a rank waiting."""
    return [g for g in ctx.gpus if g.util is not None and g.util >= ctx.th.util_idle]


def _si(x: float) -> str:
    for div, unit in ((1e12, "TB/s"), (1e9, "GB/s"), (1e6, "MB/s")):
        if x >= div:
            return f"{x / div:.3g} {unit}"
    return f"{x:.0f} B/s"


def _spread(values: Sequence[float]) -> float:
    return max(values) - min(values)


def comm_bound(ctx: Context) -> Verdict | None:
    th = ctx.th
    gpus = busy_gpus(ctx)
    if len(gpus) < 2:
        return None  # a collective needs peers: one GPU's NVLink traffic is someone else's
    traffic: list[float] = []
    shares: list[float] = []
    needs: list[float] = []
    for g in gpus:
        total = nvlink_bytes_per_s(g)
        if total is None or g.util is None or g.sm_active is None:
            return None
        if g.util < th.util_saturated or g.sm_active >= th.sm_active_high:
            return None  # gaps between kernels, or SMs full: not a GPU waiting on its links
        if g.tensor_active is not None and g.tensor_active >= th.tensor_high:
            return None  # the tensor cores keep up: compute-bound speaks for it
        peak = nvlink_peak(ctx, g)
        need = th.nvlink_share_min * peak if peak else th.nvlink_bytes_min
        if total < need:
            return None
        traffic.append(total)
        needs.append(need)
        if peak:
            shares.append(total / peak)
    sm = [g.sm_active for g in gpus if g.sm_active is not None]
    tensor = [g.tensor_active for g in gpus if g.tensor_active is not None]
    in_step = _spread(sm) <= th.comm_spread_max and (
        len(tensor) < len(gpus) or _spread(tensor) <= th.comm_spread_max
    )
    if not in_step:
        return None  # ranks that do not wait on each other: not one engine's collectives
    util_min = min(g.util for g in gpus if g.util is not None)
    i_min = traffic.index(min(traffic))
    evidence = [
        ev("gpus", len(gpus), 2, ">="),
        ev("nvlink_bytes_per_s_min", traffic[i_min], round(needs[i_min], 0), ">=", "B/s"),
    ]
    if len(shares) == len(gpus):
        evidence.append(ev("nvlink_share_min", min(shares), th.nvlink_share_min, ">=", "ratio"))
    evidence += [
        ev("util_min", util_min, th.util_saturated, ">=", "ratio"),
        ev("sm_active_max", max(sm), th.sm_active_high, "<", "ratio"),
        ev("sm_active_spread", _spread(sm), th.comm_spread_max, "<=", "ratio"),
    ]
    missing: list[str] = []
    conf = 0.85
    if len(tensor) == len(gpus):
        evidence.append(ev("tensor_active_max", max(tensor), th.tensor_high, "<", "ratio"))
    else:
        conf = 0.7  # without the tensor pipe, busy links beside busy tensor cores look alike
        missing.append("gpm")
    mean_traffic = sum(traffic) / len(traffic)
    share_text = f" ({pct(sum(shares) / len(shares))} of peak)" if len(shares) == len(gpus) else ""
    tensor_text = f", tensor cores {pct(max(tensor))}" if tensor else ""
    return make_verdict(
        "comm-bound",
        conf,
        BOX,
        evidence,
        COMM_FIX,
        f"Comm-bound: the {len(gpus)} GPUs each move {_si(mean_traffic)} over NVLink"
        f"{share_text} while busy at least {pct(util_min)} of the time with SMs at most "
        f"{pct(max(sm))} active{tensor_text}, in step: much of each step is spent in "
        "collectives (all-reduce), not in compute.",
        missing,
    )
