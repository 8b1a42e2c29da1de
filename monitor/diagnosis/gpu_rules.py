"""The GPU side: launch-bound, busy but unfilled, saturated compute or memory."""

from __future__ import annotations

from monitor.diagnosis import figures as fig
from monitor.diagnosis.rule_kit import Context, ev, make_verdict, pct, pct_read
from monitor.diagnosis.thresholds import Thresholds
from monitor.diagnosis.verdict import Evidence, Verdict
from monitor.window.scopes import gpu_scope
from monitor.window.stats import GpuWindow


def launch_gaps(g: GpuWindow, th: Thresholds) -> bool:
    """Kernels run part of the time, SMs mostly idle, and gaps between kernels remain.

    Both the eager and the CUDA-graph small step read SM active far below util; only the
    eager one leaves gaps (util 0.26 against 0.99), and only gaps say the GPU waits on
    launches. Without them, graphs or fusion of launches have nothing left to remove.
    """
    return (
        g.util is not None
        and g.sm_active is not None
        and th.launch_util_min <= g.util < th.launch_util_max
        and g.sm_active < th.launch_sm_ratio * g.util
    )


def launch_bound(ctx: Context, g: GpuWindow) -> Verdict | None:
    th = ctx.th
    if not launch_gaps(g, th):
        return None
    assert g.util is not None and g.sm_active is not None  # launch_gaps checked them
    limit = th.launch_sm_ratio * g.util
    evidence = [
        ev("util", g.util, th.launch_util_min, ">=", "ratio"),
        # The share of the time no kernel ran: what CUDA graphs would win back.
        ev("gap_share", 1.0 - g.util, round(1.0 - th.launch_util_max, 6), ">", "ratio"),
        ev("sm_active", g.sm_active, limit, "<", "ratio"),
        ev("sm_occupancy", g.sm_occupancy, unit="ratio"),
    ]
    return make_verdict(
        "launch-bound",
        0.9,
        gpu_scope(g),
        evidence,
        "capture the step in CUDA graphs (vLLM: drop --enforce-eager), torch.compile, "
        "fuse small kernels",
        f"Launch-bound: a kernel runs {pct(g.util)} of the time but SMs are active only "
        f"{g.sm_active * 100:.2g}%: tiny kernels, the GPU waits on launches.",
    )


def transfer_bound(ctx: Context, g: GpuWindow) -> Verdict | None:
    """PCIe near the link's peak while the SMs idle: the GPU waits on host transfers."""
    th = ctx.th
    pcie, peak = g.pcie_bytes_per_s, g.pcie_peak_bytes_per_s
    if pcie is None or peak is None or g.sm_active is None:
        return None
    if pcie < th.transfer_share_min * peak or g.sm_active >= th.transfer_sm_max:
        return None
    way = (
        "host to GPU"
        if (g.pcie_rx_bytes_per_s or 0) >= (g.pcie_tx_bytes_per_s or 0)
        else ("GPU to host")
    )
    evidence = [
        ev("pcie_bytes_per_s", pcie, round(th.transfer_share_min * peak), ">=", "B/s"),
        ev("pcie_peak_bytes_per_s", peak, unit="B/s"),
        ev("sm_active", g.sm_active, th.transfer_sm_max, "<", "ratio"),
        ev("util", g.util, unit="ratio"),
        ev("driver_util", g.driver_util, unit="ratio"),
    ]
    link = f"Gen{g.pcie_link_gen} x{g.pcie_link_width}"
    return make_verdict(
        "transfer-bound",
        0.85,
        gpu_scope(g),
        evidence,
        "keep data on the GPU; pin host memory and overlap copies with compute on separate "
        "streams; fewer, larger transfers; in a serving engine, look for CPU offload of "
        "weights or KV (--cpu-offload-gb, swap space) and host-side pre- or post-processing",
        f"Transfer-bound: PCIe carries {pcie / 1e9:.0f} GB/s {way}, {pct(pcie / peak)} of the "
        f"{link} link's {peak / 1e9:.0f} GB/s, while SMs are {pct(g.sm_active)} active: the "
        "GPU waits on host transfers.",
    )


_COMPUTE_FIX = (
    "the GPU is saturated on compute: more load only adds latency; for more throughput use "
    "lower precision (fp8), faster kernels, or more GPUs"
)
_MEMORY_FIX = (
    "bigger batches reuse the weights (raise --max-num-seqs if requests wait); quantise "
    "weights or the KV cache (fp8)"
)


def _roof_side(ctx: Context) -> tuple[str | None, list[Evidence]]:
    for e in ctx.window.engines:
        roof = fig.roofline(e, ctx.gpus, ctx.caps)
        if roof is not None and roof.get("side") is not None:
            return roof["side"], [
                ev("arithmetic_intensity", roof["arithmetic_intensity"], roof["ridge_intensity"],
                   ">=" if roof["side"] == "compute" else "<", "FLOP/B"),
                ev("mfu", roof["mfu"], unit="ratio"),
                ev("bandwidth_share", roof["bandwidth_share"], unit="ratio"),
            ]  # fmt: skip
    return None, []


def dram_dominates(g: GpuWindow, th: Thresholds) -> bool:
    """DRAM streams at a good share of peak while the tensor cores have little to do."""
    dram, tensor = g.dram_active, g.tensor_active
    if dram is None or tensor is None:
        return False  # one of the two unread: no comparison to make
    return dram >= th.dram_dominant_min and dram >= th.dram_tensor_ratio * tensor


_SMALL_KERNEL_FIX = (
    "more work per kernel: fuse kernels (torch.compile), batch more (more concurrency, raise "
    "--max-num-seqs), and for a small model, less tensor parallelism"
)


def busy_unfilled(ctx: Context, g: GpuWindow) -> Verdict | None:
    """A GPU busy by duty cycle whose SMs are not saturated (util >= util_saturated,
    SM active < sm_active_high): memory-bound when DRAM dominates, else, when kernels run
    without gaps, kernels too small to fill the SMs (small-kernels)."""
    th = ctx.th
    assert g.util is not None and g.sm_active is not None  # saturated() checked them
    tensor, dram = g.tensor_active, g.dram_active
    base = [
        ev("util", g.util, th.util_saturated, ">=", "ratio"),
        ev("sm_active", g.sm_active, th.sm_active_high, "<", "ratio"),
    ]
    if dram_dominates(g, th):
        assert dram is not None and tensor is not None
        _, roof_ev = _roof_side(ctx)
        return make_verdict(
            "memory-bound",
            0.7,  # below the 0.9 of a saturated bus: the SMs and the bus both have some room
            gpu_scope(g),
            base
            + [
                ev("dram_active", dram, th.dram_dominant_min, ">=", "ratio"),
                ev("tensor_active", tensor, round(dram / th.dram_tensor_ratio, 6), "<=", "ratio"),
            ]
            + roof_ev,
            _MEMORY_FIX,
            f"Memory-bound: DRAM bandwidth runs at {pct(dram)} of peak while the tensor cores "
            f"are {pct(tensor)} busy (GPU busy {pct(g.util)}, SMs {pct(g.sm_active)} active): "
            "each step streams the weights for little compute, as a small-batch decode does.",
        )
    if g.util < th.launch_util_max:
        return None  # gaps remain: launch_bound() or the CPU rules speak for them
    if (tensor is not None and tensor >= th.tensor_high) or (
        dram is not None and dram >= th.dram_high
    ):
        return None  # busy tensor cores or bus with idle SMs: no single story fits
    return make_verdict(
        "small-kernels",
        0.75,
        gpu_scope(g),
        [
            ev("util", g.util, th.launch_util_max, ">=", "ratio"),
            ev("sm_active", g.sm_active, th.sm_active_high, "<", "ratio"),
            ev("sm_occupancy", g.sm_occupancy, unit="ratio"),
            ev("tensor_active", tensor, th.tensor_high, "<", "ratio"),
            ev("dram_active", dram, th.dram_high, "<", "ratio"),
        ],
        _SMALL_KERNEL_FIX,
        f"Small kernels: the GPU is busy all the time with kernels too small to fill its SMs "
        f"(util {pct(g.util)}, SM active {pct(g.sm_active)}); neither tensor cores "
        f"({pct_read(tensor)}) nor DRAM ({pct_read(dram)}) are the limit, and with no gaps "
        "between kernels, launches are not either.",
    )


def _roofline_verdict(
    side: str,
    confidence: float,
    g: GpuWindow,
    evidence: list[Evidence],
    summary: str,
    missing: tuple[str, ...] = (),
) -> Verdict:
    """Compute- or memory-bound as the engine's roofline places the GPU (``side``)."""
    compute = side == "compute"
    return make_verdict(
        "compute-bound" if compute else "memory-bound",
        confidence,
        gpu_scope(g),
        evidence,
        _COMPUTE_FIX if compute else _MEMORY_FIX,
        summary,
        missing,
    )


def saturated(ctx: Context, g: GpuWindow) -> Verdict | None:
    th = ctx.th
    if g.util is None or g.util < th.util_saturated:
        return None
    if g.sm_active is not None and g.sm_active < th.sm_active_high:
        return busy_unfilled(ctx, g)
    base = [
        ev("util", g.util, th.util_saturated, ">=", "ratio"),
        ev("sm_active", g.sm_active, th.sm_active_high, ">=", "ratio"),
    ]
    side, roof_ev = _roof_side(ctx)
    if g.sm_active is None:
        # Duty cycle alone cannot tell a saturated GPU from one running tiny kernels.
        if side is not None:
            return _roofline_verdict(
                side, 0.5, g, base + roof_ev,
                f"Busy {pct(g.util)} of the time; the engine's roofline puts it on the {side} "
                "side (no SM activity metrics to confirm).",
                ("gpm",),
            )  # fmt: skip
        return make_verdict(
            "unknown",
            0.4,
            gpu_scope(g),
            base,
            "enable SM activity metrics (NVML GPM on Hopper and newer, or DCGM profiling) to "
            "tell saturation from launch-bound",
            f"Busy {pct(g.util)} of the time, but without SM/tensor/DRAM activity this could be "
            "saturation or tiny kernels.",
            ("gpm",),
        )
    tensor, dram = g.tensor_active, g.dram_active
    evidence = base + [
        ev("tensor_active", tensor, th.tensor_high, ">=", "ratio"),
        ev("dram_active", dram, th.dram_high, ">=", "ratio"),
    ]
    tensor_hi = tensor is not None and tensor >= th.tensor_high
    dram_hi = dram is not None and dram >= th.dram_high
    if tensor_hi and (not dram_hi or (tensor or 0) >= (dram or 0)):
        return make_verdict(
            "compute-bound",
            0.9,
            gpu_scope(g),
            evidence + roof_ev,
            _COMPUTE_FIX,
            f"Compute-bound: SMs {pct(g.sm_active)} active, tensor cores {pct(tensor or 0)} busy.",
        )
    if dram_hi:
        return make_verdict(
            "memory-bound",
            0.9,
            gpu_scope(g),
            evidence + roof_ev,
            _MEMORY_FIX,
            f"Memory-bound: SMs {pct(g.sm_active)} active, DRAM bandwidth {pct(dram or 0)} busy.",
        )
    if side is not None:
        return _roofline_verdict(
            side, 0.6, g, evidence + roof_ev,
            f"Saturated (SMs {pct(g.sm_active)} active); neither tensor nor DRAM activity is "
            f"high, the engine's roofline puts it on the {side} side.",
        )  # fmt: skip
    return make_verdict(
        "compute-bound",
        0.5,
        gpu_scope(g),
        evidence,
        _COMPUTE_FIX,
        f"Saturated: SMs {pct(g.sm_active)} active but neither tensor nor DRAM activity is "
        "high (non-tensor or latency-bound kernels).",
    )
