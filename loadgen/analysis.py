"""Pure sweep analysis: Little's law, the saturation point and its cause, goodput under SLOs.

DESIGN.md's rules: the saturation point is the step after which throughput
grows by less than ~10% per doubling of load while latency climbs, or after
which requests start to queue at the engine; its cause is the diagnosis at
the first step past it, where the limit shows. Goodput is the largest load
whose steps meet every SLO.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from loadgen.schema import Goodput, HeadroomCheck, Saturation, StepResult
from monitor.errors import ConfigError

SLO_METRICS = ("ttft", "itl", "tpot", "e2e")
SLO_PCTS = ("p50", "p90", "p95", "p99")
# Queueing at the engine counts once it holds at least this many requests on
# average and this share of those running: a lone request caught between
# finishing and admission is not a queue.
QUEUE_MIN = 1.0
QUEUE_SHARE = 0.1
LATENCY_RISE = 0.05
# A step where requests first queue is itself the saturation point only if the doubling
# up to it still bought more throughput than it cost in latency. In a closed loop
# (Little's law, in flight = throughput x latency) a doubling that raises throughput by g
# raises latency by 2/(1+g) - 1: the two are equal at g = sqrt(2) - 1, about 41%.
QUEUE_STILL_SCALING = math.sqrt(2) - 1
UNDERSERVED = 0.9  # open loop: completions below this share of the offered rate
# Causes that describe the absence of a limit rather than one.
_WEAK_CAUSES = {None, "idle", "starved", "unknown"}


def parse_slo(text: str) -> tuple[str, float]:
    """'ttft_p95=0.5' or 'itl_p95=50ms' -> ('ttft_p95_s', 0.5)."""
    m = re.fullmatch(r"\s*([a-z0-9]+)_(p\d+)\s*=\s*([0-9.]+(?:e-?\d+)?)\s*(ms|s)?\s*", text)
    if not m or m.group(1) not in SLO_METRICS or m.group(2) not in SLO_PCTS:
        raise ConfigError(
            f"bad SLO {text!r}: use METRIC_PCT=SECONDS with METRIC one of {', '.join(SLO_METRICS)} "
            f"and PCT one of {', '.join(SLO_PCTS)}, e.g. ttft_p95=0.5"
        )
    value = float(m.group(3)) / (1000.0 if m.group(4) == "ms" else 1.0)
    return f"{m.group(1)}_{m.group(2)}_s", value


def littles_law(
    client_in_flight: float | None,
    engine_in_flight: float | None,
    throughput_x_latency: float | None,
    tolerance: float = 0.15,
) -> tuple[float | None, bool | None]:
    """Largest disagreement among the views present, as a share of the largest; ok within tolerance."""
    views = [v for v in (client_in_flight, engine_in_flight, throughput_x_latency) if v is not None]
    if len(views) < 2:
        return None, None
    hi, lo = max(views), min(views)
    if hi < 0.5:
        return 0.0, True  # nearly empty system: ratios of tiny numbers mean nothing
    dev = (hi - lo) / hi
    return dev, dev <= tolerance


def load_of(step: StepResult) -> float:
    return float(step.concurrency if step.mode == "closed" else step.rate or 0.0)


def effective_steps(steps: Sequence[StepResult]) -> list[StepResult]:
    """One step per load, ordered by load: the last valid measurement, else the last one.

    A load measured only while the machine froze is left out: its numbers describe the freeze."""
    by_load: dict[float, StepResult] = {}
    for s in sorted(steps, key=lambda s: s.index):
        if s.stalled:
            continue
        x = load_of(s)
        prev = by_load.get(x)
        if prev is None or s.valid or not prev.valid:
            by_load[x] = s
    return [by_load[x] for x in sorted(by_load)]


_LATENCIES = ("e2e_p50_s", "itl_p50_s", "ttft_p50_s")


def _latencies(a: StepResult, b: StepResult) -> tuple[float, float] | None:
    """One latency measured at both loads: end-to-end where both steps finished requests.

    Streams longer than the hold finish none inside it (no e2e), and streams all started
    before the hold give no TTFT either; the gap between tokens is read from every stream
    still running, so it is the comparison left when the others are missing at one load."""
    for key in _LATENCIES:
        la, lb = getattr(a, key), getattr(b, key)
        if la is not None and lb is not None:
            return la, lb
    return None


def _typical_waiting(step: StepResult) -> float | None:
    return step.waiting_p50 if step.waiting_p50 is not None else step.waiting_mean


def queueing(step: StepResult) -> bool:
    """Requests wait through most of the hold, not only when a cohort is re-admitted.

    Streams of one length started together finish together and re-enter the queue
    together: one reading of that moment lifts the mean past the threshold, the median
    stays at zero. Steps written before the median was kept fall back to the mean."""
    w = _typical_waiting(step)
    if w is None:
        return False
    return w >= QUEUE_MIN and w >= QUEUE_SHARE * (step.running_mean or 0.0)


def gain_per_doubling(a: StepResult, b: StepResult) -> float:
    xa, xb = load_of(a), load_of(b)
    if xa <= 0 or xb <= xa:
        return math.inf
    if a.output_tokens_per_s <= 0:
        return math.inf if b.output_tokens_per_s > 0 else 0.0
    ratio = b.output_tokens_per_s / a.output_tokens_per_s
    if ratio <= 0:
        return -1.0
    return ratio ** (1.0 / math.log2(xb / xa)) - 1.0


def _limit_reason(a: StepResult, b: StepResult, gain_threshold: float) -> str | None:
    """Why load b is past the knee (a being the step before it), or None if it is not."""
    if queueing(b):
        return f"requests queue at the engine (waiting {b.waiting_mean:.1f})"
    if b.mode == "open" and b.rate and b.requests_per_s < UNDERSERVED * b.rate:
        return f"completes {b.requests_per_s:.2f} of {b.rate:.2f} req/s offered"
    gain = gain_per_doubling(a, b)
    pair = _latencies(a, b)
    rising = pair is not None and pair[1] > pair[0] * (1 + LATENCY_RISE)
    if gain < gain_threshold and rising and pair is not None:
        la, lb = pair
        return (
            f"throughput +{100 * gain:.0f}% per doubling (< {100 * gain_threshold:.0f}%) "
            f"while latency rose {la:.3g} -> {lb:.3g} s"
        )
    return None


def _cause(b: StepResult, a: StepResult | None) -> str | None:
    if b.client_limited:
        return "client-limited"
    if b.verdict not in _WEAK_CAUSES:
        return b.verdict
    if a is not None and a.verdict not in _WEAK_CAUSES:
        return a.verdict
    return b.verdict


CAP_CAUSES = {"seq-cap", "kv-cap", "token-cap"}


def _inferred_cap(saturated: Sequence[StepResult], cause: str | None) -> int | None:
    """The plateau of running while requests wait: the engine's concurrency limit.

    Only for the scheduler caps: a GPU that is simply full also makes requests
    wait, but the number running there is not a setting anyone can raise."""
    if cause not in CAP_CAUSES:
        return None
    plateaus = [s.running_max for s in saturated if queueing(s) and s.running_max is not None]
    return int(round(max(plateaus))) if plateaus else None


def _saturation_at(step: StepResult | None, **kw) -> Saturation:
    if step is None:
        return Saturation(reached=True, **kw)
    return Saturation(
        reached=True,
        concurrency=step.concurrency,
        rate=step.rate,
        output_tokens_per_s=step.output_tokens_per_s,
        requests_per_s=step.requests_per_s,
        step_index=step.index,
        **kw,
    )


def find_saturation(
    steps: Sequence[StepResult],
    gain_threshold: float = 0.10,
    error_threshold: float = 0.10,
) -> Saturation:
    ordered = effective_steps(steps)
    if not ordered:
        return Saturation(reached=False, reason="no steps measured")
    failing = next((i for i, s in enumerate(ordered) if s.error_ratio > error_threshold), None)
    healthy = ordered if failing is None else ordered[:failing]
    # A knee below the first failing load is the limit: requests that time out or are refused
    # further up are what overload looks like past it, not a lower ceiling.
    knee = _knee(healthy, gain_threshold) if healthy else None
    if knee is not None:
        return knee
    if failing is not None:
        b = ordered[failing]
        return _saturation_at(
            ordered[failing - 1] if failing else None,
            cause="errors",
            inferred_cap=None,
            reason=f"saturated by errors: {100 * b.error_ratio:.0f}% of requests failed at load "
            f"{load_of(b):g}",
        )
    top = max(ordered, key=lambda s: s.output_tokens_per_s)
    return Saturation(
        reached=False,
        concurrency=top.concurrency,
        rate=top.rate,
        output_tokens_per_s=top.output_tokens_per_s,
        requests_per_s=top.requests_per_s,
        step_index=top.index,
        reason=f"not reached: throughput still grew at the highest load ({load_of(ordered[-1]):g})",
    )


def _knee(ordered: Sequence[StepResult], gain_threshold: float) -> Saturation | None:
    """The saturation point among steps that did not fail, or None if throughput still grew."""
    if queueing(ordered[0]):
        first = ordered[0]
        cause = _cause(first, None)
        return _saturation_at(
            first,
            cause=cause,
            inferred_cap=_inferred_cap(ordered, cause),
            reason=f"already saturated at the lowest load ({load_of(first):g}): requests queue",
        )
    for i in range(1, len(ordered)):
        a, b = ordered[i - 1], ordered[i]
        why = _limit_reason(a, b, gain_threshold)
        if why is None:
            continue
        cause = _cause(b, a)
        gain = gain_per_doubling(a, b)
        ran_more = b.mode == "closed" and (b.running_mean or 0.0) > load_of(a) + 0.5
        if queueing(b) and gain >= max(gain_threshold, QUEUE_STILL_SCALING) and ran_more:
            # The engine ran more at once at b than a offered it: its limit lies between a
            # and b, and b did much more work than a, with the first requests waiting for a
            # slot. (Where b runs no more than a offered, the limit is a itself; where b
            # gained less than it cost in latency, a was already the knee.)
            return _saturation_at(
                b,
                cause=cause,
                inferred_cap=_inferred_cap(ordered[i:], cause),
                reason=f"at load {load_of(b):g}: requests start to queue (waiting "
                f"{_typical_waiting(b) or 0.0:.1f}) while throughput still grew "
                f"+{100 * gain:.0f}% per doubling",
                refine_from_step_index=a.index,
            )
        return _saturation_at(
            a,
            cause=cause,
            inferred_cap=_inferred_cap(ordered[i:], cause),
            reason=f"past load {load_of(a):g}: {why}",
        )
    return None


def meets(step: StepResult, slos: dict[str, float], error_threshold: float) -> bool:
    if step.error_ratio > error_threshold or not step.valid:
        return False
    for key, limit in slos.items():
        v = getattr(step, key, None)
        if v is None or v > limit:
            return False
    return True


def find_goodput(
    steps: Sequence[StepResult], slos: dict[str, float], error_threshold: float = 0.10
) -> Goodput | None:
    if not slos:
        return None
    good = [s for s in effective_steps(steps) if meets(s, slos, error_threshold)]
    if not good:
        return Goodput(slos=slos, met=False, reason="no step met every SLO")
    best = max(good, key=load_of)
    return Goodput(
        slos=slos,
        met=True,
        concurrency=best.concurrency,
        rate=best.rate,
        output_tokens_per_s=best.output_tokens_per_s,
        requests_per_s=best.requests_per_s,
        step_index=best.index,
        reason=f"largest load meeting every SLO: {load_of(best):g}",
    )


def headroom_check(steps: Sequence[StepResult], sat: Saturation) -> HeadroomCheck | None:
    """How far the first (lightest) step's headroom estimate was from the measured knee."""
    measured = effective_steps(list(steps))
    first = next((s for s in measured if s.headroom), None)
    if first is None or not sat.reached or first.headroom is None:
        return None
    room = first.headroom
    est_c, est_r = room.get("concurrency_at_limit"), room.get("rate_at_limit_rps")
    if sat.concurrency is not None:
        ratio = est_c / sat.concurrency if est_c is not None and sat.concurrency else None
    else:
        ratio = est_r / sat.rate if est_r is not None and sat.rate else None
    return HeadroomCheck(
        step_index=first.index,
        estimated_concurrency=est_c,
        estimated_rate_rps=est_r,
        limit=room.get("limit"),
        measured_concurrency=sat.concurrency,
        measured_rate_rps=sat.rate if sat.rate is not None else sat.requests_per_s,
        ratio=None if ratio is None else round(ratio, 3),
    )
