"""GPU energy from NVML's counter (read every so often) and power between reads, over a fake
pynvml: the first reading, counter resets, a missing counter and MIG instances."""

from __future__ import annotations

import pytest
from fake_nvml import FakeGpu, FakeNvml, workload_gpu

from monitor.sources.energy import EnergyMeter
from monitor.sources.nvml import NvmlSource

ENERGY = "nvmlDeviceGetTotalEnergyConsumption"


class Clock:
    """Virtual time for the source and the fake driver together."""

    def __init__(self, fake: FakeNvml) -> None:
        self.fake = fake
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def tick(self, seconds: float) -> None:
        self.now += seconds
        self.fake.advance(seconds)


def metered(gpu: FakeGpu, every: float) -> tuple[FakeNvml, Clock, NvmlSource]:
    """A source over one fake GPU in virtual time, asking the energy counter every ``every`` s."""
    fake = FakeNvml([gpu])
    clock = Clock(fake)
    return fake, clock, NvmlSource(nvml=fake, energy_every_s=every, clock=clock)


def ticks(src: NvmlSource, clock: Clock, n: int, every: float = 1.0) -> list[float | None]:
    out = []
    for _ in range(n):
        clock.tick(every)
        out.append(src.read().gpus[0].energy_joules)
    return out


def test_first_reading_is_zero_and_counter_read_only_every_span() -> None:
    fake, clock, src = metered(FakeGpu(power_mw=300_000), 30.0)
    first = src.read().gpus[0]
    assert first.energy_joules == 0.0 and first.energy_source == "counter"
    assert fake.calls[ENERGY] == 1  # the probe's read is the first reading
    energy = ticks(src, clock, 60)
    # 300 W for 60 s: 18 kJ, every tick fresh (power integrated between counter reads).
    assert energy[-1] == pytest.approx(300 * 60, rel=1e-6)
    assert energy[9] == pytest.approx(300 * 10, rel=1e-6)
    assert energy == sorted(energy)
    # The counter (3.9 ms a call on an H200) twice in a minute, not 60 times.
    assert fake.calls[ENERGY] == 3


def test_counter_corrects_what_power_between_reads_missed() -> None:
    # The power reading says 200 W, but the counter grew at 400 W (power is a 1 s average,
    # bursts between readings escape it): at each counter read the figure is the counter's.
    gpu = FakeGpu(power_mw=400_000)
    fake, clock, src = metered(gpu, 10.0)
    src.read()
    gpu.power_mw = 200_000
    fake.advance(0)  # nothing
    energy = []
    for _ in range(30):
        gpu.power_mw = 400_000  # what the counter counts ...
        clock.tick(1.0)
        gpu.power_mw = 200_000  # ... and what the power reading says
        energy.append(src.read().gpus[0].energy_joules)
    assert energy[9] == pytest.approx(4000, rel=1e-6)  # read at 10 s: the counter's
    assert energy[29] == pytest.approx(12000, rel=1e-6)
    assert energy[14] == pytest.approx(4000 + 5 * 200, rel=1e-6)  # between: power since


def test_counter_behind_the_integration_never_runs_backwards() -> None:
    gpu = FakeGpu(power_mw=100_000)
    fake, clock, src = metered(gpu, 10.0)
    base_mj = gpu.energy_mj
    src.read()
    energy = []
    for _ in range(25):
        gpu.power_mw = 100_000
        clock.tick(1.0)
        gpu.power_mw = 300_000  # the reading says more than was spent
        energy.append(src.read().gpus[0].energy_joules)
    # The reading ran ahead of the counter (2.5 kJ at 25 s): the figure held at its highest
    # (3.7 kJ at 19 s) rather than fall at each counter read.
    assert all(b >= a for a, b in zip(energy, energy[1:]))
    assert energy[18] == energy[-1] == pytest.approx(3700)
    # Honest readings again: the counter catches up and the figure is exact from there.
    energy = ticks(src, clock, 20)
    assert energy[-1] == pytest.approx((gpu.energy_mj - base_mj) / 1000, rel=1e-9)


def test_counter_reset_counts_what_came_after_it() -> None:
    gpu = FakeGpu(power_mw=250_000)
    fake, clock, src = metered(gpu, 5.0)
    src.read()
    before = ticks(src, clock, 10)[-1]
    assert before == pytest.approx(2500)
    gpu.energy_mj = 0  # the driver reloaded: its counter starts again
    after = ticks(src, clock, 10)
    assert all(a >= before for a in after)
    assert after[-1] == pytest.approx(5000, rel=1e-3)


def test_missing_counter_falls_back_to_integrated_power_marked_and_noted() -> None:
    gpu = FakeGpu(name="Tesla P100", power_mw=150_000, energy_mj=None)
    fake, clock, src = metered(gpu, 5.0)
    assert any("no energy counter" in n and "power" in n for n in src.notes)
    src.read()
    energy = ticks(src, clock, 20)
    assert energy[-1] == pytest.approx(150 * 20)
    assert src.read().gpus[0].energy_source == "power"
    assert fake.calls[ENERGY] == 1  # not supported: never asked again


def test_mig_instance_has_no_energy_the_gpu_has_it() -> None:
    mig = workload_gpu("matmul", name="NVIDIA H200 MIG 3g.71gb")
    mig.unsupported |= {"nvmlDeviceGetPowerUsage"}
    mig.samples_supported = False
    parent = workload_gpu("idle", mig_enabled=True, migs={0: mig}, power_mw=400_000)
    fake, clock, src = metered(parent, 5.0)
    assert any("MIG" in n and "GPU 0's as a whole" in n for n in src.notes)
    src.read()
    clock.tick(10.0)
    whole, inst = src.read().gpus
    assert inst.energy_joules is None and inst.energy_source is None  # a dash, not 0
    assert whole.energy_joules == pytest.approx(4000)


def test_meter_without_any_reading_is_none() -> None:
    m = EnergyMeter(5.0)
    assert m.update(1.0, None) is None and m.source is None
    assert m.update(2.0, 100.0) == 0.0  # the first reading
    assert m.update(3.0, 100.0) == pytest.approx(100.0)
    # A tick without a power reading holds the last one over its span.
    assert m.update(4.0, None) == pytest.approx(200.0)
    assert m.source == "power"


def test_a_counter_that_fails_now_and_then_is_asked_once_a_span_not_every_tick() -> None:
    gpu = FakeGpu(power_mw=200_000)
    fake, clock, src = metered(gpu, 10.0)
    src.read()
    gpu.lost.add(ENERGY)  # a transient failure (not "not supported"): keep asking, a span apart
    asked = fake.calls[ENERGY]
    energy = ticks(src, clock, 30)
    assert fake.calls[ENERGY] - asked == 3  # at 10, 20 and 30 s, not 30 times
    # Meanwhile the power readings carry the figure, never backwards.
    assert energy[-1] == pytest.approx(200 * 30) and energy == sorted(energy)
