"""The GPU timeline's per-period reduction and the histograms' bucket edges."""

from __future__ import annotations

import pytest

from simulator.gpu_timeline import GpuTimeline
from simulator.hardware import GpuCost
from simulator.stats import Hist


def cost(
    phase: float, busy: float, sm: float = 0.0, tensor: float = 0.0, dram: float = 0.0
) -> GpuCost:
    return GpuCost(0.0, 0.0, busy, busy, 0.0, phase, sm, 0.0, tensor, dram)


def test_util_is_the_busy_share_of_the_last_period() -> None:
    tl = GpuTimeline(origin=0.0)
    # 10 steps of 50 ms busy every 100 ms over the first second, then nothing.
    for i in range(10):
        tl.add(i * 0.1, cost(0.05, 0.05, sm=0.05 * 0.9, tensor=0.01, dram=0.04))
    a = tl.activity(1.0, 1.0)
    assert a.util == pytest.approx(0.5)
    assert a.sm_active == pytest.approx(0.45)
    assert (a.tensor_active, a.dram_active) == (pytest.approx(0.1), pytest.approx(0.4))
    # Half a second later only the last half of that second is inside the period.
    assert tl.activity(1.5, 1.0).util == pytest.approx(0.25)
    assert tl.activity(3.0, 1.0).util == 0


def test_an_interval_cut_by_the_period_counts_pro_rata() -> None:
    tl = GpuTimeline(origin=0.0)
    tl.add(0.5, cost(1.0, 1.0))  # busy from 0.5 to 1.5
    assert tl.activity(1.0, 1.0).util == pytest.approx(0.5)
    assert tl.activity(2.0, 1.0).util == pytest.approx(0.5)


def test_a_young_timeline_reports_over_its_lifetime() -> None:
    tl = GpuTimeline(origin=10.0)
    tl.add(10.0, cost(0.2, 0.2))
    assert tl.activity(10.2, 1.0).util == pytest.approx(1.0)


def test_histogram_buckets_are_less_or_equal() -> None:
    h = Hist((1.0, 2.0))
    for v in (1.0, 1.5, 2.0, 3.0):
        h.observe(v)
    assert h.cumulative() == [(1.0, 1), (2.0, 3), (float("inf"), 4)]
    assert (h.count, h.sum) == (4, 7.5)


def test_energy_counter_is_idle_floor_plus_load_and_counts_only_up_to_now() -> None:
    tl = GpuTimeline(origin=0.0)
    # Half a second fully busy (tensor and DRAM too) from t=1, on a 100-700 W board.
    tl.add(1.0, cost(0.5, 0.5, tensor=0.5, dram=0.5))
    assert tl.energy_j(1.0, 100.0, 700.0) == pytest.approx(100.0)  # idle so far
    # Half of the step lies before 1.25: a quarter second at full load.
    assert tl.energy_j(1.25, 100.0, 700.0) == pytest.approx(125.0 + 600 * 0.25)
    assert tl.energy_j(3.0, 100.0, 700.0) == pytest.approx(300.0 + 600 * 0.5)
    # Past the window the activity keeps, the energy still counts it.
    later = tl.energy_j(100.0, 100.0, 700.0)
    assert later == pytest.approx(10_000.0 + 300.0)
    # The mean power over a span agrees with the power the page serves for that span.
    tl2 = GpuTimeline(origin=0.0)
    for i in range(10):
        tl2.add(i * 0.1, cost(0.05, 0.05, sm=0.045, tensor=0.01, dram=0.04))
    a = tl2.activity(1.0, 1.0)
    load = 0.3 * a.util + 0.4 * a.tensor_active + 0.3 * a.dram_active
    assert tl2.energy_j(1.0, 100.0, 700.0) == pytest.approx(100.0 + 600.0 * load)
