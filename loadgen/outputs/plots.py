"""PNG plots of a sweep (matplotlib's Agg renderer: no display needed).

Each figure is drawn once, when it is saved: its margins are fixed here rather than
measured by a layout pass (tight_layout draws the whole figure to measure it, which cost
as much as the draw that saves it), and titles sit at a fixed height (matplotlib's
automatic title placement measures every y axis of the figure again at each draw).
Figures are plain ``Figure`` objects, not pyplot's: no backend to choose, nothing to close.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from pathlib import Path

from matplotlib import rcParams
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

from loadgen.analysis import effective_steps, load_of
from loadgen.schema import StepResult, SweepResult

PLOTS = (
    "throughput.png",
    "latency.png",
    "latency_vs_throughput.png",
    "engine.png",
    "ttft_parts.png",
)


def _xs(steps: Sequence[StepResult]) -> list[float]:
    return [load_of(s) for s in steps]


def _series(steps: Sequence[StepResult], name: str) -> list[float]:
    out = []
    for s in steps:
        v = getattr(s, name)
        out.append(float("nan") if v is None else float(v))
    return out


def _xlabel(result: SweepResult) -> str:
    return (
        "concurrency (requests in flight)"
        if result.config.mode == "closed"
        else "offered rate (req/s)"
    )


def _mark_saturation(ax, result: SweepResult) -> None:
    sat = result.saturation
    x = sat.concurrency if result.config.mode == "closed" else sat.rate
    if sat.reached and x is not None:
        label = f"saturation ({sat.cause or 'cause unknown'})"
        ax.axvline(x, color="tab:red", linestyle="--", linewidth=1, label=label)


def _log2_axis(ax, xs: list[float]) -> None:
    """A log axis for doubling sweeps, ticked at the loads measured (12, 14 and 28 between
    powers of two get their own tick) and labelled in plain numbers, not 2^k."""
    if xs and min(xs) > 0 and max(xs) / min(xs) >= 4:
        ax.set_xscale("log", base=2)
    ticks = sorted(set(xs))
    if ticks:
        ax.xaxis.set_major_locator(FixedLocator(ticks))
        shown = _labelled(ax, ticks, rotated=_rotated(xs))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}" if v in shown else ""))
        ax.xaxis.set_minor_locator(NullLocator())
        if _rotated(xs):
            ax.tick_params(axis="x", labelrotation=45)


def _labelled(ax, ticks: list[float], *, rotated: bool) -> set[float]:
    """The loads whose tick labels fit side by side: the ends, then powers of two, then the
    rest, each kept if it clears the labels already kept. A sweep that bisects toward its
    knee measures 192, 224 and 256, a fraction of a doubling apart on a log axis: their
    labels would print over each other, so the crowded ones keep a tick and lose the text."""
    lo, hi = ax.get_xlim()
    log = ax.get_xscale() == "log"
    if log:
        lo, hi = math.log2(lo), math.log2(hi)
    span = hi - lo
    if span <= 0:
        return set(ticks)
    fig = ax.get_figure()
    width_in = ax.get_position().width * fig.get_figwidth()
    size_in = FontProperties(size=rcParams["xtick.labelsize"]).get_size_in_points() / 72

    def at(v: float) -> float:  # inches from the axis' left end
        return ((math.log2(v) if log else v) - lo) / span * width_in

    def half(v: float) -> float:  # half a label's footprint along the axis, and a gap
        text = 0.3 * size_in * len(f"{v:g}")
        # Turned 45 degrees, a label spans its length and its height, each at cos 45.
        return 0.71 * (text + 0.5 * size_in) + 0.02 if rotated else text + 0.05

    first, last = ticks[0], ticks[-1]
    order = [first, last] + sorted(
        ticks[1:-1], key=lambda v: (not math.log2(v).is_integer() if v > 0 else True, v)
    )
    kept: list[float] = []
    for v in order:
        if all(abs(at(v) - at(k)) >= half(v) + half(k) for k in kept):
            kept.append(v)
    return set(kept)


def _rotated(xs: list[float]) -> bool:
    """More than 8 loads: their labels are turned 45 degrees so they do not overlap."""
    return len(set(xs)) > 8


# Margins in inches, wide enough for what the axes carry: y tick labels of six digits or a
# log axis's "6 x 10^-1" and the axis label beside them; the bottom holds the x tick labels
# (taller when turned) and the x label; the top the title.
_LEFT_IN = 1.02
_RIGHT_IN = 0.18
_RIGHT_TWIN_IN = 0.95  # a second y axis on the right: its tick labels and label
_TOP_IN = 0.37
_BOTTOM_IN = 0.6
_BOTTOM_ROTATED_IN = 0.82


def _figure(rows: int, height: float, *, twin: bool, rotated: bool) -> tuple[Figure, list]:
    """A 7-inch-wide figure of ``rows`` axes stacked on one load axis, its layout fixed."""
    fig = Figure(figsize=(7, height))
    axes = fig.subplots(rows, 1, sharex=rows > 1, squeeze=False)[:, 0].tolist()
    width = 7
    fig.subplots_adjust(
        left=_LEFT_IN / width,
        right=1 - (_RIGHT_TWIN_IN if twin else _RIGHT_IN) / width,
        bottom=(_BOTTOM_ROTATED_IN if rotated else _BOTTOM_IN) / height,
        top=1 - _TOP_IN / height,
        hspace=0.1,
    )
    return fig, axes


def write_plots(out: Path, result: SweepResult) -> list[Path]:
    steps = effective_steps(result.steps)
    paths: list[Path] = []
    if not steps:
        return paths
    xs = _xs(steps)
    xl = _xlabel(result)

    fig, (ax,) = _figure(1, 4.2, twin=True, rotated=_rotated(xs))
    ax.plot(xs, _series(steps, "output_tokens_per_s"), "o-", label="output tok/s")
    ax.set_xlabel(xl)
    ax.set_ylabel("output tokens/s")
    _log2_axis(ax, xs)
    ax2 = ax.twinx()
    # A step in which no request finished (streams longer than the hold) has no request
    # rate to plot, not a rate of zero.
    rps = [float("nan") if s.requests_completed == 0 else s.requests_per_s for s in steps]
    ax2.plot(xs, rps, "s--", color="tab:green", label="req/s")
    ax2.set_ylabel("requests/s")
    _mark_saturation(ax, result)
    lines = ax.get_legend_handles_labels()
    lines2 = ax2.get_legend_handles_labels()
    ax.legend(lines[0] + lines2[0], lines[1] + lines2[1], loc="upper left", fontsize=8)
    _title(ax, "Throughput vs load")
    ax.grid(alpha=0.3)
    paths.append(_save(fig, out / "throughput.png"))

    fig, (ax,) = _figure(1, 4.2, twin=False, rotated=_rotated(xs))
    for name, style in (("ttft_p50_s", "o-"), ("ttft_p95_s", "o:"), ("itl_p50_s", "s-"),
                        ("itl_p95_s", "s:"), ("e2e_p50_s", "^-")):  # fmt: skip
        ax.plot(xs, _series(steps, name), style, label=name.removesuffix("_s").replace("_", " "))
    ax.set_yscale("log")
    ax.set_xlabel(xl)
    ax.set_ylabel("seconds")
    _log2_axis(ax, xs)
    _mark_saturation(ax, result)
    ax.legend(fontsize=8)
    _title(ax, "Latency vs load")
    ax.grid(alpha=0.3, which="both")
    paths.append(_save(fig, out / "latency.png"))

    fig, (ax,) = _figure(1, 4.2, twin=False, rotated=False)
    tput = _series(steps, "output_tokens_per_s")
    for name, style in (("ttft_p95_s", "o-"), ("e2e_p50_s", "^-"), ("itl_p95_s", "s-")):
        ax.plot(tput, _series(steps, name), style, label=name.removesuffix("_s").replace("_", " "))
    for s, x, y in zip(steps, tput, _series(steps, "e2e_p50_s")):
        ax.annotate(
            f"{load_of(s):g}", (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7
        )
    ax.set_yscale("log")
    ax.set_xlabel("output tokens/s")
    ax.set_ylabel("seconds")
    ax.legend(fontsize=8)
    _title(ax, "Latency vs throughput (labels: load)")
    ax.grid(alpha=0.3, which="both")
    paths.append(_save(fig, out / "latency_vs_throughput.png"))

    preempt = _series(steps, "preemptions_per_s")
    preempted = any(p == p and p > 0 for p in preempt)  # only where it did (NaN != NaN)
    fig, (ax, bx) = _figure(2, 6, twin=preempted, rotated=_rotated(xs))
    for name in ("util", "sm_active", "tensor_active", "dram_active"):
        ys = [
            float("nan") if getattr(s.gpu, name) is None else 100 * getattr(s.gpu, name)
            for s in steps
        ]
        ax.plot(xs, ys, "o-", label=name)
    if not any(s.gpu.gpus for s in steps):
        ax.text(0.5, 0.5, "no GPU readings (give --dcgm-exporter or --nvml)", ha="center",
                va="center", transform=ax.transAxes, color="gray")  # fmt: skip
    kv = [
        float("nan") if s.kv_cache_usage_mean is None else 100 * s.kv_cache_usage_mean
        for s in steps
    ]
    ax.plot(xs, kv, "D-", color="tab:purple", label="KV cache used")
    ax.set_ylabel("GPU activity, KV cache (%)")
    ax.set_ylim(0, 105)
    _title(ax, "GPU activity, KV cache and engine queues vs load")
    ax.grid(alpha=0.3)
    _mark_saturation(ax, result)
    handles, labels = ax.get_legend_handles_labels()
    if preempted:
        px = ax.twinx()
        px.plot(xs, preempt, "v--", color="tab:red", label="preemptions/s")
        px.set_ylabel("preemptions/s")
        h2, l2 = px.get_legend_handles_labels()
        handles, labels = handles + h2, labels + l2
    ax.legend(handles, labels, fontsize=8)
    bx.plot(xs, _series(steps, "running_mean"), "o-", label="running")
    bx.plot(xs, _series(steps, "waiting_mean"), "s-", label="waiting")
    bx.plot(xs, _series(steps, "client_in_flight_mean"), "x:", label="client in-flight")
    bx.set_xlabel(xl)
    bx.set_ylabel("requests")
    _log2_axis(bx, xs)
    bx.legend(fontsize=8)
    bx.grid(alpha=0.3)
    paths.append(_save(fig, out / "engine.png"))
    parts = [s.ttft_parts or {} for s in steps]
    if any(p.get("engine_ttft_s") is not None or p.get("median_request") for p in parts):
        paths.append(_ttft_parts_plot(out, steps, parts, xl))
    if any(s.energy_per_token_joules is not None for s in steps):
        paths.append(_energy_plot(out, result, steps, xs, xl))
    return paths


def _energy_plot(
    out: Path, result: SweepResult, steps: Sequence[StepResult], xs: list[float], xl: str
) -> Path:
    """Energy per token against load, under throughput on the same load axis: batching
    spreads the GPU's watts over more tokens until the box saturates."""
    fig, (ax, bx) = _figure(2, 6, twin=True, rotated=_rotated(xs))
    ax.plot(xs, _series(steps, "output_tokens_per_s"), "o-", label="output tok/s")
    ax.set_ylabel("output tokens/s")
    _title(ax, "Throughput and energy per token vs load")
    ax.grid(alpha=0.3)
    _mark_saturation(ax, result)
    ax.legend(fontsize=8, loc="upper left")
    bx.plot(xs, _series(steps, "energy_per_token_joules"), "o-", color="tab:orange",
            label="J/token")  # fmt: skip
    bx.set_yscale("log")
    bx.set_ylabel("joules per output token")
    bx.set_xlabel(xl)
    _log2_axis(bx, xs)
    _mark_saturation(bx, result)
    px = bx.twinx()
    px.plot(xs, _series(steps, "gpu_power_watts"), "s--", color="tab:red", label="GPU power (W)")
    px.set_ylabel("watts")
    px.set_ylim(bottom=0)  # watts from zero: an idle floor is most of a GPU's draw
    h1, l1 = bx.get_legend_handles_labels()
    h2, l2 = px.get_legend_handles_labels()
    bx.legend(h1 + h2, l1 + l2, fontsize=8, loc="upper right")
    bx.grid(alpha=0.3, which="both")
    return _save(fig, out / "energy.png")


def _ttft_parts_plot(out: Path, steps: Sequence[StepResult], parts: list[dict], xl: str) -> Path:
    """Where the time to first token goes at each step: a stacked bar per step.

    The median request's own parts where the engine sent its spans (they add up to the
    client's median), else the engine's means (which a few long waits pull away from it)."""
    spans = [bool(p.get("median_request")) for p in parts]
    parts = [p.get("median_request") or p for p in parts]
    fig, (ax,) = _figure(1, 4.2, twin=False, rotated=False)
    labels = [f"{load_of(s):g}" for s in steps]
    bottom = [0.0] * len(steps)
    for key, name, colour in (
        ("queue_s", "queued in the engine", "tab:red"),
        ("prefill_s", "prefill", "tab:blue"),
        ("engine_other_s", "other in the engine", "tab:gray"),
        ("outside_s", "outside the engine", "tab:orange"),
    ):
        ys = [1000 * float(p.get(key) or 0.0) for p in parts]
        ax.bar(labels, ys, bottom=bottom, label=name, color=colour)
        bottom = [b + y for b, y in zip(bottom, ys)]
    client = [s.ttft_p50_s for s in steps]
    ax.plot(labels, [1000 * c if c is not None else float("nan") for c in client], "k_",
            markersize=18, label="client TTFT p50")  # fmt: skip
    ax.set_xlabel(xl)
    ax.set_ylabel("time to first token (ms)")
    how = (
        "the median request's parts, from the engine's spans"
        if all(spans)
        else "engine means, client median"
        if not any(spans)
        else "median request where spans came, else engine means"
    )
    _title(ax, f"Where the time to first token goes ({how})", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, axis="y")
    return _save(fig, out / "ttft_parts.png")


def _title(ax, text: str, **kwargs) -> None:
    """The title at the top of the axes, where matplotlib would place it (nothing is drawn
    above these axes), without its search for labels in the way at each draw."""
    ax.set_title(text, y=1.0, **kwargs)


def warm() -> None:
    """Draw a small figure with text, to nowhere: the fonts and renderer a sweep's plots use
    loaded ahead of them (outputs.warm_up). Its log axis builds the mathtext parser its
    tick labels need (10^k: a quarter of a second, once a process)."""
    fig = Figure(figsize=(2, 1))
    ax = fig.add_subplot()
    ax.plot([1, 2], [0.01, 10])
    ax.set_yscale("log")
    _title(ax, "warm-up", fontsize=10)
    fig.savefig(io.BytesIO(), format="png", dpi=50)


def _save(fig: Figure, path: Path) -> Path:
    fig.savefig(path, dpi=100)
    return path
