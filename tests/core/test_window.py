"""Window aggregates: what a user reads as rates, means and percentiles."""

from __future__ import annotations

import math

import pytest

from monitor.sources import samples
from monitor.window.full import compute_window
from monitor.window.stats import (
    TTFT,
    counter_increase,
    histogram_delta,
    histogram_quantile,
    histogram_share_at_least,
)


def hist(counts: list[float], bounds: list[float], total: float) -> samples.Histogram:
    cum, acc = [], 0.0
    for c in counts:
        acc += c
        cum.append(acc)
    return samples.Histogram(tuple(zip(bounds, cum)), sum=total, count=acc)


BOUNDS = [0.1, 0.5, 1.0, math.inf]


def engine(
    t_requests: float, running: float, waiting: float, ttft: samples.Histogram | None = None
) -> samples.EngineSample:
    return samples.EngineSample(
        url="http://127.0.0.1:8000/metrics",
        model_name="m",
        engine="0",
        running=running,
        waiting=waiting,
        request_success_total=t_requests,
        generation_tokens_total=t_requests * 100,
        histograms=((TTFT, ttft),) if ttft else (),
    )


def test_counter_increase_survives_a_server_restart() -> None:
    # 10 -> 20 (+10), restart to 3 (+3), -> 8 (+5)
    assert counter_increase([10, 20, 3, 8]) == 18
    assert counter_increase([5]) is None
    assert counter_increase([None, 1, None, 4]) == 3


def test_engine_rates_and_means_over_the_window() -> None:
    snaps = [
        samples.Snapshot(t=float(i), wall=1000.0 + i, engines=(engine(2.0 * i, 4, 8 if i else 0),))
        for i in range(6)
    ]
    w = compute_window(snaps)
    (e,) = w.engines
    assert e.requests_per_s == pytest.approx(2.0)
    assert e.generation_tokens_per_s == pytest.approx(200.0)
    assert e.running_mean == 4
    assert e.waiting_mean == pytest.approx(40 / 6)
    assert e.in_flight_mean == pytest.approx(4 + 40 / 6)
    assert e.running_series == (4, 4, 4, 4, 4, 4)


def test_restart_inside_window_gives_non_negative_rates() -> None:
    values = [100.0, 110.0, 2.0, 12.0]
    snaps = [
        samples.Snapshot(t=float(i), wall=float(i), engines=(engine(v, 1, 0),))
        for i, v in enumerate(values)
    ]
    (e,) = compute_window(snaps).engines
    assert e.requests_per_s == pytest.approx((10 + 2 + 10) / 3)


def test_histogram_quantile_matches_prometheus_interpolation() -> None:
    h = hist([50, 40, 10, 0], BOUNDS, 20.0)
    # rank 50 of 100 falls at the top of the first bucket
    assert histogram_quantile(0.5, h) == pytest.approx(0.1)
    # rank 95: 5 into the third bucket of 10 -> halfway from 0.5 to 1.0
    assert histogram_quantile(0.95, h) == pytest.approx(0.75)
    assert histogram_quantile(0.5, samples.Histogram((), 0, 0)) is None


def test_quantile_in_inf_bucket_returns_highest_finite_bound() -> None:
    h = hist([0, 0, 1, 9], BOUNDS, 50.0)
    assert histogram_quantile(0.9, h) == 1.0


def test_histogram_delta_is_what_happened_in_the_window() -> None:
    early = hist([100, 0, 0, 0], BOUNDS, 5.0)  # old, fast requests
    late = hist([100, 0, 10, 0], BOUNDS, 12.0)  # 10 new slow ones
    d = histogram_delta([early, late])
    assert d is not None and d.count == 10
    assert histogram_quantile(0.5, d) == pytest.approx(0.75)
    # a restart in between: the later histogram counts from zero
    restarted = hist([0, 0, 2, 0], BOUNDS, 1.6)
    d2 = histogram_delta([late, restarted])
    assert d2 is not None and d2.count == 2


def test_ttft_percentiles_come_from_the_window_only() -> None:
    h0 = hist([1000, 0, 0, 0], BOUNDS, 10.0)
    h1 = hist([1000, 0, 20, 0], BOUNDS, 25.0)
    snaps = [
        samples.Snapshot(t=0.0, wall=0.0, engines=(engine(0, 1, 0, h0),)),
        samples.Snapshot(t=1.0, wall=1.0, engines=(engine(20, 1, 0, h1),)),
    ]
    (e,) = compute_window(snaps).engines
    assert 0.5 < e.ttft_p50_s <= 1.0  # not dragged down by the 1000 old fast requests
    assert e.ttft_mean_s == pytest.approx(0.75)


def test_share_of_steps_at_token_budget() -> None:
    bounds = [256, 512, 1024, 2048, math.inf]
    h = hist([10, 0, 0, 90, 0], bounds, 0)
    # steps in buckets above 1024 (lower bound 1024) are those that reached the budget of 1024
    assert histogram_share_at_least(h, 1024) == pytest.approx(0.9)


def test_gpu_means_and_none_stays_none() -> None:
    def g(util: float | None, sm: float | None) -> samples.GpuSample:
        return samples.GpuSample(
            index=0, uuid="GPU-x", name="H200", source="nvml", util=util, sm_active=sm
        )

    snaps = [
        samples.Snapshot(t=0.0, wall=0.0, gpus=(g(1.0, None),)),
        samples.Snapshot(t=1.0, wall=1.0, gpus=(g(0.5, None),)),
    ]
    (gw,) = compute_window(snaps).gpus
    assert gw.util == pytest.approx(0.75)
    assert gw.util_max == 1.0
    assert gw.sm_active is None  # unsupported is absent, never 0
    assert gw.tensor_active is None


def test_host_busiest_thread_and_engine_cores() -> None:
    def host(t: float, busy: float) -> samples.HostSample:
        return samples.HostSample(
            cpu_count=2,
            cpu_total_seconds=2 * t,
            cpu_idle_seconds=2 * t - busy,
            cpu_steal_seconds=0.0,
            processes=(
                samples.ProcessCpu(
                    pid=10,
                    name="python",
                    cpu_seconds=busy,
                    threads=(
                        samples.ThreadCpu(10, "main", 0.1 * t),
                        samples.ThreadCpu(11, "EngineCore", busy - 0.1 * t),
                    ),
                ),
            ),
        )

    snaps = [
        samples.Snapshot(t=float(i), wall=float(i), host=host(float(i), 0.9 * i)) for i in range(5)
    ]
    h = compute_window(snaps).host
    assert h is not None
    assert h.cpu_busy_ratio == pytest.approx(0.45)
    assert h.engine_cpu_cores == pytest.approx(0.9)
    assert h.busiest_thread is not None and h.busiest_thread.name == "EngineCore"
    assert h.busiest_thread.cpu_ratio == pytest.approx(0.8)


def test_window_selects_interval() -> None:
    snaps = [
        samples.Snapshot(t=float(i), wall=float(i), engines=(engine(float(i * i), 1, 0),))
        for i in range(10)
    ]
    w = compute_window(snaps, start=5.0, end=8.0)
    assert w.samples == 4
    (e,) = w.engines
    assert e.requests_per_s == pytest.approx((64 - 25) / 3)


def test_empty_window() -> None:
    w = compute_window([])
    assert w.samples == 0 and w.gpus == () and w.engines == () and w.host is None


def _pairwise_delta(hists: list[samples.Histogram | None]) -> samples.Histogram | None:
    """histogram_delta by its definition: what each pair of readings added, summed (a
    count that fell: all of the newer; other buckets: what came before them dropped)."""
    present = [h for h in hists if h is not None]
    if len(present) < 2:
        return None
    bounds = [le for le, _ in present[-1].buckets]
    acc, total, count = [0.0] * len(bounds), 0.0, 0.0
    for prev, cur in zip(present, present[1:]):
        if [le for le, _ in cur.buckets] != bounds:
            acc, total, count = [0.0] * len(bounds), 0.0, 0.0
            continue
        whole = cur.count < prev.count or [le for le, _ in prev.buckets] != bounds
        for i, (_, c) in enumerate(cur.buckets):
            acc[i] += c if whole else c - prev.buckets[i][1]
        total += cur.sum if whole else cur.sum - prev.sum
        count += cur.count if whole else cur.count - prev.count
    return samples.Histogram(buckets=tuple(zip(bounds, acc)), sum=total, count=count)


@pytest.mark.parametrize("seed", range(40))
def test_histogram_delta_adds_every_pair_through_restarts_and_new_buckets(seed: int) -> None:
    import random

    rng = random.Random(seed)
    other = [0.05, 0.2, 1.0, math.inf]
    readings: list[samples.Histogram | None] = []
    counts, bounds, total = [0.0] * 4, BOUNDS, 0.0
    for _ in range(rng.randint(2, 14)):
        roll = rng.random()
        if roll < 0.1:
            readings.append(None)  # a tick without the engine
            continue
        if roll < 0.25:  # the server restarted, now and then with other buckets
            counts, total = [0.0] * 4, 0.0
            if rng.random() < 0.4:
                bounds = other if bounds is BOUNDS else BOUNDS
        for _ in range(rng.randint(0, 30)):
            i = rng.randrange(4)
            counts[i] += 1
            total += rng.uniform(0.0, 3.0)
        readings.append(hist(list(counts), bounds, total))
    got, want = histogram_delta(readings), _pairwise_delta(readings)
    if want is None:
        assert got is None
        return
    assert got is not None
    assert got.buckets == want.buckets and got.count == want.count
    assert got.sum == pytest.approx(want.sum, rel=1e-12, abs=1e-12)
