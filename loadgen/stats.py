"""Client metrics for one step's hold window, from the raw per-request records.

Requests are placed in the window by when they finished (latencies, req/s), or
by when each token arrived (output tok/s), so a request that straddles the
window's edge counts only the tokens it delivered inside it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from loadgen.records import RequestRecord, WorkerStatus

MIN_COMPLETIONS_FOR_LITTLE = 20


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolated percentile (q in 0-1) of unsorted values; None when empty."""
    if not values:
        return None
    s = sorted(values)
    if len(s) == 1:
        return s[0]
    pos = q * (len(s) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def tokens_in_window(rec: RequestRecord, start: float, end: float) -> float:
    """Output tokens of one request that arrived within [start, end]."""
    if rec.ttft is None:
        return 0.0
    events = 1 + len(rec.itl)
    weight = (rec.output_tokens / events) if rec.output_tokens else 1.0
    t = rec.start + rec.ttft
    n = 1 if start <= t <= end else 0
    for gap in rec.itl:
        t += gap
        if t > end:
            break
        if t >= start:
            n += 1
    return n * weight


RATE_PARTS = 4


def rate_rse(records: Sequence[RequestRecord], start: float, end: float,
             parts: int = RATE_PARTS) -> float | None:  # fmt: skip
    """Relative standard error of the output token rate over [start, end].

    The hold cut into equal parts, each part's rate: their spread over the square root of
    their number is how far the whole hold's rate may be from the server's steady one.
    None when the hold delivered no tokens."""
    width = (end - start) / parts
    if width <= 0:
        return None
    rates = []
    for k in range(parts):
        lo, hi = start + k * width, start + (k + 1) * width
        rates.append(sum(tokens_in_window(r, lo, hi) for r in records) / width)
    mean = sum(rates) / parts
    if mean <= 0:
        return None
    var = sum((x - mean) ** 2 for x in rates) / (parts - 1)
    return math.sqrt(var / parts) / mean


@dataclass(frozen=True, slots=True)
class ClientStats:
    duration_s: float
    requests_completed: int
    requests_failed: int
    error_ratio: float
    errors_sample: tuple[str, ...]
    requests_per_s: float
    output_tokens_per_s: float
    input_tokens_per_s: float | None
    ttft: dict[str, float | None]  # p50, p90, p95, p99
    itl: dict[str, float | None]
    tpot: dict[str, float | None]
    e2e: dict[str, float | None]
    e2e_mean_s: float | None
    in_flight_mean: float
    littles_law_in_flight: float | None  # requests/s x mean e2e
    sched_lag_p50_s: float | None
    sched_lag_p99_s: float | None
    sched_lag_max_s: float | None
    requests_started: int
    ttft_kernel_ratio: float | None = None  # share of TTFTs stamped by the kernel on arrival
    ttft_mean_s: float | None = None
    ttft_sched: dict[str, float | None] | None = None  # from when each request was due
    e2e_sched: dict[str, float | None] | None = None
    # Means over the requests that carry both figures: asked for, and served (usage).
    requested_prompt_mean: float | None = None
    served_prompt_mean: float | None = None
    requested_completion_mean: float | None = None
    served_completion_mean: float | None = None
    ttft_p50_by_turn: dict[str, float] | None = None
    requests_by_turn: dict[str, int] | None = None


_QS = {"p50": 0.5, "p90": 0.9, "p95": 0.95, "p99": 0.99}


def _pcts(values: Sequence[float]) -> dict[str, float | None]:
    return {k: percentile(values, q) for k, q in _QS.items()}


def client_stats(records: Iterable[RequestRecord], start: float, end: float) -> ClientStats:
    dur = max(1e-9, end - start)
    ok_end: list[RequestRecord] = []
    failed = 0
    errors: list[str] = []
    tokens = 0.0
    busy = 0.0
    lags: list[float] = []
    started = 0
    for r in records:
        r_end = r.end if r.end is not None else r.start
        if start <= r.start <= end:
            started += 1
            if r.lag is not None:
                lags.append(r.lag)
        if r_end >= start and r.start <= end:
            busy += max(0.0, min(r_end, end) - max(r.start, start))
            tokens += tokens_in_window(r, start, end)
        if not (start <= r_end <= end):
            continue
        if r.ok:
            ok_end.append(r)
        else:
            failed += 1
            if r.error and r.error not in errors and len(errors) < 5:
                errors.append(r.error)
    done = len(ok_end)
    ttfts = [r.ttft for r in ok_end if r.ttft is not None]
    stamped = [r.ttft_kernel for r in ok_end if r.ttft_kernel is not None]
    e2es = [r.e2e for r in ok_end if r.e2e is not None]
    itls = [g for r in ok_end for g in r.itl]
    tpots = [
        (r.e2e - r.ttft) / (r.output_tokens - 1)
        for r in ok_end
        if r.e2e is not None and r.ttft is not None and r.output_tokens and r.output_tokens > 1
    ]
    prompt = [r.prompt_tokens for r in ok_end if r.prompt_tokens is not None]
    due = [r for r in ok_end if r.lag is not None]
    pin = [(r.requested_in, r.prompt_tokens) for r in ok_end
           if r.requested_in is not None and r.prompt_tokens is not None]  # fmt: skip
    pout = [(r.requested_out, r.output_tokens) for r in ok_end
            if r.requested_out is not None and r.output_tokens is not None]  # fmt: skip
    by_turn: dict[int, list[float]] = {}
    for r in ok_end:
        if r.turn is not None and r.ttft is not None:
            by_turn.setdefault(r.turn, []).append(r.ttft)
    rps = done / dur
    e2e_mean = _mean(e2es)
    return ClientStats(
        ttft_mean_s=_mean(ttfts),
        duration_s=dur,
        requests_completed=done,
        requests_failed=failed,
        error_ratio=failed / (done + failed) if done + failed else 0.0,
        errors_sample=tuple(errors),
        requests_per_s=rps,
        output_tokens_per_s=tokens / dur,
        input_tokens_per_s=(sum(prompt) / dur) if prompt else None,
        ttft=_pcts(ttfts),
        itl=_pcts(itls),
        tpot=_pcts(tpots),
        e2e=_pcts(e2es),
        e2e_mean_s=e2e_mean,
        in_flight_mean=busy / dur,
        # With only a few completions in the window, requests crossing its edges
        # swamp throughput x latency: leave that view out rather than cry wolf.
        littles_law_in_flight=None
        if e2e_mean is None or done < MIN_COMPLETIONS_FOR_LITTLE
        else rps * e2e_mean,
        sched_lag_p50_s=percentile(lags, 0.5),
        sched_lag_p99_s=percentile(lags, 0.99),
        sched_lag_max_s=max(lags) if lags else None,
        requests_started=started,
        ttft_kernel_ratio=sum(stamped) / len(stamped) if stamped else None,
        ttft_sched=_pcts([r.lag + r.ttft for r in due if r.ttft is not None]) if due else None,
        e2e_sched=_pcts([r.lag + r.e2e for r in due if r.e2e is not None]) if due else None,
        requested_prompt_mean=_mean([a for a, _ in pin]),
        served_prompt_mean=_mean([b for _, b in pin]),
        requested_completion_mean=_mean([a for a, _ in pout]),
        served_completion_mean=_mean([b for _, b in pout]),
        ttft_p50_by_turn={str(k): percentile(v, 0.5) for k, v in sorted(by_turn.items())}  # type: ignore[misc]
        if by_turn
        else None,
        requests_by_turn={str(k): len(v) for k, v in sorted(by_turn.items())} if by_turn else None,
    )


@dataclass(frozen=True, slots=True)
class ClientCpu:
    busiest_ratio: float | None  # the busiest generator process, share of one core
    total_cpu_s: float | None
    processes: int


def client_cpu(statuses: Iterable[WorkerStatus], start: float, end: float) -> ClientCpu:
    """CPU each generator process used between the status lines nearest the window's edges."""
    by_worker: dict[str, list[WorkerStatus]] = {}
    for s in statuses:
        by_worker.setdefault(s.worker, []).append(s)
    busiest: float | None = None
    total = 0.0
    n = 0
    for sts in by_worker.values():
        inside = [s for s in sts if start - 0.5 <= s.time <= end + 0.5]
        if len(inside) < 2:
            continue
        first, last = inside[0], inside[-1]
        dt = last.time - first.time
        if dt <= 0:
            continue
        used = max(0.0, last.cpu_seconds - first.cpu_seconds)
        ratio = used / dt
        busiest = ratio if busiest is None else max(busiest, ratio)
        total += used * (end - start) / dt
        n += 1
    return ClientCpu(busiest, total if n else None, n)
