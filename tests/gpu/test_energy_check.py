"""bench/gpu/energy_check.py's pure parts (the lead runs the whole on the H200): integration,
the counter across a reset, the comparison against the 5% goal, work per joule, call cost."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

PATH = Path(__file__).resolve().parents[2] / "bench" / "gpu" / "energy_check.py"
spec = importlib.util.spec_from_file_location("energy_check", PATH)
assert spec is not None and spec.loader is not None
ec = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ec)


def test_integrate_is_trapezoids_over_uneven_readings() -> None:
    # 100 W, a ramp to 700 W over a second, 700 W; readings 0.1-0.3 s apart.
    samples = [(0.0, 100.0), (0.1, 100.0), (0.4, 100.0), (1.4, 700.0), (1.5, 700.0)]
    assert ec.integrate(samples) == pytest.approx(10 + 30 + 400 + 70)
    assert ec.integrate(samples[:1]) == 0.0


def test_counter_joules_across_a_reset() -> None:
    assert ec.counter_joules([1_000_000, 1_400_000, 1_900_000]) == pytest.approx(900.0)
    # The driver reloaded after the second reading: the third counts from zero.
    assert ec.counter_joules([1_000_000, 1_400_000, 300_000, 500_000]) == pytest.approx(900.0)
    assert ec.counter_joules([5.0]) == 0.0


@pytest.mark.parametrize(
    ("counter", "power", "within"),
    [(42_000.0, 42_500.0, True), (42_000.0, 40_000.0, True), (42_000.0, 44_500.0, False),
     (0.0, 10.0, False)],
)  # fmt: skip
def test_compare_against_the_five_percent_goal(counter: float, power: float, within: bool) -> None:
    c = ec.compare(counter, power)
    assert c["within_goal"] is within
    if counter:
        assert c["ratio"] == pytest.approx(power / counter, abs=1e-4)


def test_work_per_joule_of_square_bf16_matmuls() -> None:
    w = ec.per_work(1000.0, 500, n=8192)
    assert w["joules_per_matmul"] == 2.0
    assert w["tflop_per_joule"] == pytest.approx(2 * 8192**3 * 500 / 1000.0 / 1e12, abs=1e-4)
    assert ec.per_work(0.0, 10)["tflop_per_joule"] is None


def test_call_cost_is_the_median_per_call_on_given_clocks() -> None:
    ticks = iter([0.0, 3.9e-3, 1.0, 1.004, 2.0, 2.0039])  # CPU: 3.9, 4.0, 3.9 ms
    walls = iter([0.0, 4e-3, 1.0, 1.005, 2.0, 2.004])
    slept: list[float] = []
    cost = ec.call_cost(
        lambda: None, 3, 0.1, cpu=lambda: next(ticks), wall=lambda: next(walls),
        sleep=slept.append,
    )  # fmt: skip
    assert cost == {"cpu_us": 3900.0, "wall_us": 4000.0}
    assert slept == [0.1] * 3


def test_report_lines_say_the_ratio_and_the_costs() -> None:
    result = {
        "gpu": 0, "name": "NVIDIA H200", "hz": 10.0, "readings": 680, "span_s": 68.0,
        "loop_s": 60.0, "compare": ec.compare(42_000.0, 42_840.0), "matmuls": 50_000,
        "work": ec.per_work(42_000.0, 50_000),
        "costs": {"energy counter (back to back)": {"cpu_us": 3900.0, "wall_us": 3950.0}},
        "headroom": {"energy_every_s": 30.0, "joules": 41_800.0, "ratio": 0.9952},
    }  # fmt: skip
    text = "\n".join(ec.report_lines(result))
    assert "ratio (power x time / counter): 1.02  (within 5%)" in text
    assert "cost energy counter (back to back): 3900.0 us CPU" in text
    assert "ratio to the counter 0.9952" in text
