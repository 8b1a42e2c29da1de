"""The numbers behind the verdicts: Little's law, the caps, the busy fraction, the roofline.

Pure functions of a window. They return None where a figure cannot be computed
from what was read, never a guess dressed as a measurement.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from monitor.diagnosis.peaks import GpuPeak, match_gpu, peak_for_key
from monitor.diagnosis.thresholds import Caps, Thresholds
from monitor.window.stats import (
    E2E,
    ITERATION_TOKENS,
    PREFILL,
    QUEUE,
    TTFT,
    EngineWindow,
    GpuWindow,
    HostWindow,
    mean_present,
)

# -- GPU ---------------------------------------------------------------------


def util_mean(gpus: Sequence[GpuWindow]) -> float | None:
    return mean_present([g.util for g in gpus])


def sm_active_mean(gpus: Sequence[GpuWindow]) -> float | None:
    return mean_present([g.sm_active for g in gpus])


def tensor_active_mean(gpus: Sequence[GpuWindow]) -> float | None:
    return mean_present([g.tensor_active for g in gpus])


def dram_active_mean(gpus: Sequence[GpuWindow]) -> float | None:
    return mean_present([g.dram_active for g in gpus])


def busy_fraction(gpus: Sequence[GpuWindow]) -> float | None:
    """Share of the time the box's GPUs had a kernel running (the duty cycle), mean over GPUs.

    Story B: 12 ms of GPU work then 28 ms of CPU per step reads 12 / 40 = 0.30.
    """
    return util_mean(gpus)


def gpu_activity(gpus: Sequence[GpuWindow]) -> float | None:
    """How much of the GPU is in use: SM active where known (duty cycle overstates tiny
    kernels), else the duty cycle."""
    sm = sm_active_mean(gpus)
    return sm if sm is not None else util_mean(gpus)


def gpus_saturated(gpus: Sequence[GpuWindow], th: Thresholds) -> bool | None:
    """True when every GPU's duty cycle and (where known) SM active are high."""
    if not gpus:
        return None
    for g in gpus:
        if g.util is None:
            return None
        if g.util < th.util_saturated:
            return False
        if g.sm_active is not None and g.sm_active < th.sm_active_high:
            return False
    return True


def compute_saturated(gpus: Sequence[GpuWindow], th: Thresholds) -> bool | None:
    """True when every GPU is saturated with its tensor cores busy: more sequences or a
    bigger token budget would only add latency. A memory-bound GPU is not: bigger batches
    reuse the weights each step streams, so light decode load reads util ~100% yet has room.
    None when it cannot be told (no GPU, or no tensor activity metric)."""
    sat = gpus_saturated(gpus, th)
    if sat is None:
        return None
    if not sat:
        return False
    if any(g.tensor_active is None for g in gpus):
        return None
    return all((g.tensor_active or 0.0) >= th.tensor_high for g in gpus)


# -- Engine queue and caps ---------------------------------------------------


def _aligned(e: EngineWindow) -> list[tuple[float, float]]:
    # The window drops unread gauges from each series separately; only equal lengths align.
    if len(e.running_series) == len(e.waiting_series):
        return list(zip(e.running_series, e.waiting_series))
    return []


def waiting_share(e: EngineWindow) -> float | None:
    """Share of samples in which requests waited."""
    if not e.waiting_series:
        return None
    return sum(1 for w in e.waiting_series if w > 0) / len(e.waiting_series)


def queue_sustained(e: EngineWindow, th: Thresholds) -> bool:
    share = waiting_share(e)
    return (
        e.waiting_mean is not None
        and e.waiting_mean > th.waiting_min
        and share is not None
        and share >= th.waiting_sustained
    )


@dataclass(frozen=True, slots=True)
class SeqCap:
    value: int | None  # None: unknown (not given, not reported, never inferred)
    inferred: bool  # from the plateau of running while requests wait, in this window
    assumed: bool  # kept for the JSON's sake: headroom no longer assumes a default cap
    at_cap_share: float | None  # share of queued samples with running at the cap
    queued_samples: int
    # Where the value came from: "given" (--max-num-seqs), "reported" (the engine said so),
    # "inferred" (this window's plateau), "remembered" (an earlier window's plateau), or None.
    origin: str | None = None
    # Wall time of the last window that inferred a remembered cap.
    seen_at: float | None = None
    # How a reported cap was asked ("server_info", "cmdline").
    reported_by: str | None = None
    reported: bool = False  # exported by the engine itself (Triton's max requests)


@dataclass(frozen=True, slots=True)
class SeenCap:
    """A cap inferred in an earlier window: kept, since a plateau shows only under load."""

    value: int
    wall: float


def seq_cap(e: EngineWindow, caps: Caps, th: Thresholds, seen: SeenCap | None = None) -> SeqCap:
    queued = [r for r, w in _aligned(e) if w > 0]

    def share_at(cap: float) -> float | None:
        if not queued:
            return None
        strict = sum(1 for r in queued if r >= cap * (1 - th.plateau_tolerance)) / len(queued)
        if strict < th.plateau_top_share:
            return strict
        # Pressed against the ceiling most of the time: a reading one below it is the gap
        # between a request finishing and the next one admitted (short requests on a small
        # cap fall there often), not a lower plateau. A budget that lets one more in only
        # now and then (running mostly one below its peak) stays strict.
        floor = cap - max(1.0, cap * th.plateau_tolerance)
        return sum(1 for r in queued if r >= floor) / len(queued)

    n = len(queued)
    if caps.max_num_seqs is not None:
        return SeqCap(caps.max_num_seqs, False, False, share_at(caps.max_num_seqs), n, "given")
    if e.seq_cap_reported is not None and e.seq_cap_reported >= 1:
        # Exported by the engine itself (Triton's max requests).
        cap = int(round(e.seq_cap_reported))
        return SeqCap(cap, False, False, share_at(cap), n, "reported", None, "metrics", True)
    if e.reported_max_num_seqs is not None:
        cap = e.reported_max_num_seqs
        return SeqCap(
            cap, False, False, share_at(cap), n, "reported", None, e.reported_caps_origin, True
        )
    if n >= th.plateau_min_samples and max(queued) >= 1:
        top = max(queued)
        share = share_at(top)
        if share is not None and share >= th.plateau_share:
            return SeqCap(int(round(top)), True, False, share, n, "inferred")
    if seen is not None:
        return SeqCap(seen.value, False, False, share_at(seen.value), n, "remembered", seen.wall)
    return SeqCap(None, False, False, None, n)


@dataclass(frozen=True, slots=True)
class TokenBudget:
    value: int | None
    inferred: bool
    pinned_share: float | None  # share of engine steps that filled the budget
    prefill_share: float | None  # prompt tokens over all tokens processed
    origin: str | None = None  # "given", "reported", "inferred"; None: unknown
    # Mean tokens a step over the budget, where it shows more steps full than the histogram's
    # buckets do (vLLM V1's count: see token_budget); None: the buckets' share stands.
    mean_fill: float | None = None


def _bucket_counts(e: EngineWindow) -> list[tuple[float, float, float]]:
    """(lower, upper, count) per bucket of the iteration-tokens histogram delta."""
    hist = e.histogram(ITERATION_TOKENS)
    if hist is None or hist.count <= 0:
        return []
    out = []
    lower, prev = 0.0, 0.0
    for le, cum in hist.buckets:
        out.append((lower, le, cum - prev))
        lower, prev = le, cum
    return out


def prefill_share(e: EngineWindow) -> float | None:
    p, g = e.prompt_tokens_per_s, e.generation_tokens_per_s
    if p is None or g is None or p + g <= 0:
        return None
    return p / (p + g)


def token_budget(e: EngineWindow, caps: Caps, th: Thresholds) -> TokenBudget:
    buckets = _bucket_counts(e)
    total = sum(c for _, _, c in buckets)
    pshare = prefill_share(e)
    origin = "given"
    if caps.max_num_batched_tokens is None and e.reported_max_num_batched_tokens is not None:
        caps = dataclasses.replace(caps, max_num_batched_tokens=e.reported_max_num_batched_tokens)
        origin = "reported"
    if caps.max_num_batched_tokens is not None:
        budget = caps.max_num_batched_tokens
        pinned = fill = None
        if total > 0:
            # Coarse: the bucket holding budget x token_fill counts whole.
            edge = budget * th.token_fill
            pinned = sum(c for _, le, c in buckets if le >= edge) / total
            mean = e.iteration_tokens_mean
            if mean is not None and mean >= edge:
                # vLLM V1 counts a prompt's tokens whole at the step its prefill completes,
                # not in the steps that ran its chunks: with prompts longer than the budget the
                # histogram shows a few huge steps and many small ones while every step ran
                # full. Its mean (all tokens over all steps) is still right, and steps of at
                # most the budget averaging m have at least (m - edge) / (budget - edge) of
                # them at the edge or above.
                by_mean = min(1.0, (mean - edge) / (budget - edge))
                if by_mean > pinned:
                    pinned, fill = by_mean, mean / budget
        return TokenBudget(budget, False, pinned, pshare, origin, fill)
    finite = [(lo, le, c) for lo, le, c in buckets if c > 0 and not math.isinf(le)]
    if total > 0 and finite:
        lo, le, c = finite[-1]
        share = c / total
        if le >= th.token_budget_infer_min and share >= th.token_pinned_share:
            return TokenBudget(int(le), True, share, pshare, "inferred")
    return TokenBudget(None, False, None, pshare)


# -- Little's law --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Littles:
    in_flight: float | None  # mean running + waiting
    throughput_rps: float | None  # the engine's completion rate (requests_per_s)
    latency_s: float | None  # mean end-to-end latency from the histogram delta
    predicted_in_flight: float | None  # throughput x latency
    ok: bool | None  # measured and predicted agree within littles_tolerance
    slot_latency_s: float | None  # how long a request holds a sequence slot
    completions: float | None = None  # requests that finished in the window
    # Why ok is None with both sides measured: few-completions, short-window, inconclusive;
    # none-finished: requests ran and none finished in the window (no rate to judge with).
    unjudged: str | None = None


def littles(e: EngineWindow, th: Thresholds) -> Littles:
    """L = X x W over the window, with X the engine's completion rate: the one request rate
    every face shows (engine panel, capacity line, fixes), so no two figures disagree."""
    in_flight = e.in_flight_mean
    rate = e.requests_per_s
    latency = e.e2e_mean_s
    ok, unjudged = None, None
    if rate == 0 and e.running_mean:
        # Requests ran and none finished: they outlast the window, whose completion rate
        # says nothing of the engine's (a dash, never 0 req/s).
        rate, unjudged = None, "none-finished"
    predicted = rate * latency if rate is not None and latency is not None else None
    hist = e.histogram(E2E)
    completions = hist.count if hist is not None else None
    if predicted is not None and in_flight is not None and completions is not None:
        if latency is not None and latency > e.elapsed_s:
            # L = lambda x W holds over intervals long against W: over a shorter window
            # in-flight still reflects arrivals from before it, and one window can read
            # half or twice its prediction with nothing queueing anywhere. Said before too
            # few finished: a window that widens by itself widens for it.
            unjudged = "short-window"
        elif completions < th.littles_min_completions:
            unjudged = "few-completions"
        else:
            # Agreement is within the tolerance. Disagreement must pass it plus what the
            # window's own estimates can be off by: ~1/sqrt(n) for the rate and the mean
            # latency of n completions, up to W/T for requests crossing its edges, and the
            # change of in-flight across the window (completions lag arrivals in a ramp).
            scale = max(in_flight, predicted)
            off = abs(predicted - in_flight) / scale if scale else 0.0
            pairs = _aligned(e)
            drift = abs(sum(pairs[-1]) - sum(pairs[0])) / scale if len(pairs) >= 2 and scale else 0
            slack = 1.0 / math.sqrt(completions) + (latency or 0.0) / e.elapsed_s + drift
            if off <= th.littles_tolerance:
                ok = True
            elif off > th.littles_tolerance + slack:
                ok = False
            else:
                unjudged = "inconclusive"
    # How long a request holds a sequence slot: Little's law on the running stage, so that
    # the rate filling the cap (cap / slot) is consistent with running / cap by construction.
    slot = None
    if e.running_mean and rate:
        slot = e.running_mean / rate
    elif latency is not None:
        slot = latency - (e.queue_mean_s or 0.0)
    if slot is not None and slot <= 0:
        slot = None
    return Littles(in_flight, rate, latency, predicted, ok, slot, completions, unjudged)


def steps_per_s(e: EngineWindow) -> float | None:
    hist = e.histogram(ITERATION_TOKENS)
    if hist is None or e.elapsed_s <= 0:
        return None
    return hist.count / e.elapsed_s


# -- Roofline ------------------------------------------------------------------


def gpu_peak(gpus: Sequence[GpuWindow], caps: Caps) -> GpuPeak | None:
    if caps.gpu is not None:
        return peak_for_key(caps.gpu)
    for g in gpus:
        peak = match_gpu(g.name, g.memory_total_bytes)
        if peak is not None:
            return peak
    return None


def roofline(e: EngineWindow, gpus: Sequence[GpuWindow], caps: Caps) -> dict[str, Any] | None:
    """Place the live engine on its GPU's roofline from vLLM's estimated FLOPs and bytes.

    vLLM's counters are per GPU already. None when the counters are absent or
    all zero (vLLM only counts with its MFU metrics enabled).
    """
    flops = e.flops_per_s
    reads, writes = e.read_bytes_per_s, e.write_bytes_per_s
    byts = None if reads is None and writes is None else (reads or 0.0) + (writes or 0.0)
    if flops is None and byts is None:
        return None
    if not flops and not byts:
        return None
    peak = gpu_peak(gpus, caps)
    intensity = flops / byts if flops is not None and byts else None
    out: dict[str, Any] = {
        "achieved_flops_per_s": flops,
        "achieved_bytes_per_s": byts,
        "arithmetic_intensity": intensity,
        "ridge_intensity": None,
        "mfu": None,
        "bandwidth_share": None,
        "side": None,
        "gpu": None,
        "precision": caps.precision,
    }
    if peak is not None:
        ridge = peak.ridge(caps.precision)
        out.update(
            ridge_intensity=ridge,
            mfu=flops / peak.flops(caps.precision) if flops is not None else None,
            bandwidth_share=byts / peak.hbm_bytes_per_s if byts is not None else None,
            side=None if intensity is None else ("compute" if intensity >= ridge else "memory"),
            gpu=peak.name,
            precision=caps.precision if peak.fp8_flops is not None else "bf16",
        )
    return out


# -- Host ----------------------------------------------------------------------


def engine_thread_ratio(host: HostWindow | None) -> float | None:
    if host is None or host.busiest_thread is None:
        return None
    return host.busiest_thread.cpu_ratio


# -- Where the time to first token goes ------------------------------------------


def ttft_parts(e: EngineWindow, client_ttft_s: float | None = None) -> dict[str, Any] | None:
    """TTFT split into queueing in the engine, prefill, and outside the engine.

    Means add up (medians do not, and a histogram's median is only as fine as its buckets:
    vLLM's queue-time buckets start at 0.3 s): ``queue_s + prefill_s + engine_other_s`` is the
    engine's
    mean TTFT, and ``outside_s`` what the client saw beyond it (network, gateway, a late
    client), known only where a client's TTFT is given (a sweep's step). A part whose
    histogram the engine lacks is None.
    """
    if e.histogram(TTFT) is None and e.histogram(QUEUE) is None and e.histogram(PREFILL) is None:
        return None
    queue, prefill, engine = e.queue_mean_s, e.prefill_mean_s, e.ttft_mean_s
    other = None
    # vLLM observes TTFT at the first token but queue and prefill times when a request
    # finishes: over a window shorter than a request the two are different requests, and
    # the parts can outgrow the whole. They are shown as a split only where they fit it.
    consistent = None
    if engine is not None and queue is not None and prefill is not None:
        other = max(0.0, engine - queue - prefill)
        consistent = queue + prefill <= 1.1 * engine + 1e-3
    outside = None
    if client_ttft_s is not None and engine is not None:
        outside = max(0.0, client_ttft_s - engine)
    return {
        "queue_s": _r(queue, 6),
        "prefill_s": _r(prefill, 6),
        "engine_other_s": _r(other, 6),
        "outside_s": _r(outside, 6),
        "engine_ttft_s": _r(engine, 6),
        # The engine's median TTFT from its histogram (vLLM's TTFT buckets start at 1 ms,
        # fine enough), for setting beside a client's median.
        "engine_ttft_p50_s": _r(e.ttft_p50_s, 6),
        "consistent": consistent,
    }


def ttft_dominant(parts: dict[str, Any] | None, share: float = 0.5) -> tuple[str, float] | None:
    """The part of the engine's TTFT that takes at least ``share`` of it, and its share.

    None where the parts do not fit inside the whole (queue and prefill times of other
    requests than the TTFTs: a window shorter than a request)."""
    if not parts or not parts.get("engine_ttft_s") or parts.get("consistent") is False:
        return None
    total = parts["engine_ttft_s"]
    for name in ("queue_s", "prefill_s"):
        v = parts.get(name)
        if v is not None and total > 0 and v / total >= share:
            return name.removesuffix("_s"), v / total
    return None


# -- How much more load fits: a part of the step model (monitor.diagnosis.limits) ----


def kv_read_share(e: EngineWindow, caps: Caps) -> float | None:
    """The share of the bytes an engine step reads that grows with the sequences running
    (their KV cache); the rest is the weights, streamed once a step however many ride on it.

    From vLLM's own estimates of FLOPs and bytes (its MFU counters): ~2 FLOPs per parameter
    per token, so the weights a step reads are FLOPs per token / 2 parameters of 2 bytes
    (1 for fp8). Attention's FLOPs, which grow with the context, make that a little high
    (4k-token contexts on an 8B model: 13%), the KV share a little low."""
    flops, reads, steps = e.flops_per_s, e.read_bytes_per_s, steps_per_s(e)
    tokens = (e.prompt_tokens_per_s or 0.0) + (e.generation_tokens_per_s or 0.0)
    if not flops or not reads or not steps or tokens <= 0:
        return None
    weight_bytes = flops / tokens / 2.0 * (1.0 if caps.precision == "fp8" else 2.0)
    return min(1.0, max(0.0, 1.0 - weight_bytes * steps / reads))


@dataclass(frozen=True, slots=True)
class CapFill:
    """The request rate that fills the sequence cap, said one way on every face.

    ``today_rps`` is the cap over how long a request holds a slot now (Little's law on the
    running stage: ``fill_rate_rps``); ``rps`` allows for the longer steps the cap's
    sequences ride on (each request ``growth`` times as long), the headroom figure's rate
    when the cap is the first limit. Where another limit binds before the cap fills,
    ``first`` names it and the slots will not fill."""

    cap: int
    today_rps: float | None
    rps: float | None
    growth: float
    first: str | None = None


def cap_fill(
    e: EngineWindow,
    cap: SeqCap,
    lit: Littles,
    room: dict[str, Any] | None,
    growth_at: Callable[[float], float] | None,
) -> CapFill | None:
    """``growth_at(f)``: how much longer a step takes with f times today's sequences (the
    headroom figure's step model, limits.StepModel.growth; None: not known)."""
    if not cap.value:
        return None
    today = cap.value / lit.slot_latency_s if lit.slot_latency_s else None
    running = e.running_mean
    growth = 1.0
    if running and running > 0 and growth_at is not None:
        growth = growth_at(max(1.0, cap.value / running))
    rps = None if today is None else today / growth
    first = None
    if room is not None and room["limit"] != "seq-cap":
        seq = room["limits"].get("seq-cap")
        if seq is None or room["factor"] < seq:
            first = room["limit"]
    return CapFill(cap.value, today, rps, round(growth, 3), first)


# -- All of it, for the report -------------------------------------------------


def _r(v: float | None, nd: int = 4) -> float | None:
    return None if v is None else round(float(v), nd)


def engine_analysis(
    e: EngineWindow,
    gpus: Sequence[GpuWindow],
    host: HostWindow | None,
    caps: Caps,
    th: Thresholds,
    made: tuple[Littles, SeqCap, TokenBudget],
    room: dict[str, Any] | None,
    filled: CapFill | None,
) -> dict[str, Any]:
    """The per-engine figures the report, exporter and TUI show (names are an interface).

    ``made``: the engine's Little's-law figures, sequence cap and token budget, as the rules
    made them; ``room``: the headroom figure (limits.headroom); ``filled``: the rate that
    fills the sequence cap (cap_fill)."""
    lit, cap, budget = made
    busy = busy_fraction(gpus)
    steps = steps_per_s(e)
    fill = cap.value / lit.slot_latency_s if cap.value and lit.slot_latency_s else None
    gpu_ms = gap_ms = None
    if busy is not None and steps:
        gpu_ms = 1000.0 * busy / steps
        gap_ms = 1000.0 * (1.0 - min(busy, 1.0)) / steps
    roof = roofline(e, gpus, caps)
    return {
        "headroom": room,
        "ttft_parts": ttft_parts(e),
        "littles_in_flight": _r(lit.in_flight),
        "littles_throughput_rps": _r(lit.throughput_rps),
        "littles_latency_s": _r(lit.latency_s),
        "littles_predicted_in_flight": _r(lit.predicted_in_flight),
        "littles_ok": lit.ok,
        "littles_completions": _r(lit.completions),
        "littles_unjudged": lit.unjudged,
        "slot_latency_s": _r(lit.slot_latency_s),
        "seq_cap": cap.value,
        "seq_cap_inferred": cap.inferred,
        "seq_cap_reported": cap.reported,
        "seq_cap_assumed": cap.assumed,
        "seq_cap_origin": cap.origin,
        "seq_cap_seen_at": cap.seen_at,
        "seq_cap_reported_by": cap.reported_by,
        # At today's request time (C / slot time); the faces show fill_rate_at_cap_rps, which
        # allows for the longer steps at the cap (the headroom figure's rate there).
        "fill_rate_rps": _r(fill),
        "fill_rate_at_cap_rps": None if filled is None else _r(filled.rps),
        "fill_latency_growth": None if filled is None else filled.growth,
        # The limit that binds before the cap fills (the slots will not fill), or None.
        "fill_first_limit": None if filled is None else filled.first,
        # The rate fill_rate_rps is measured against: the engine's requests_per_s.
        "requests_per_s": _r(lit.throughput_rps),
        "fill_share": _r(
            lit.throughput_rps / fill if fill and lit.throughput_rps is not None else None
        ),
        "queue_sustained": queue_sustained(e, th),
        "waiting_share": _r(waiting_share(e)),
        "token_budget": budget.value,
        "token_budget_inferred": budget.inferred,
        "token_budget_origin": budget.origin,
        "token_pinned_share": _r(budget.pinned_share),
        "prefill_share": _r(budget.prefill_share),
        "busy_fraction": _r(busy),
        "steps_per_s": _r(steps, 3),
        "gpu_ms_per_step": _r(gpu_ms, 3),
        "host_gap_ms_per_step": _r(gap_ms, 3),
        "engine_thread_cpu_ratio": _r(engine_thread_ratio(host)),
        "roofline": None
        if roof is None
        else {k: (_r(v, 6) if isinstance(v, float) else v) for k, v in roof.items()},
    }
