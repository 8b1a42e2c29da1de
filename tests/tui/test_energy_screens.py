"""Energy on the TUI's engine and GPU screens, driven by Textual's pilot over a live sampler:
J/token, J/request, tokens/J, power and cost where the GPU has an energy counter; a dash
and why on a MIG instance, which has none."""

from __future__ import annotations

import time

import pytest
from tui_helpers import open_screen, wait_frames

from monitor.diagnosis import Diagnoser
from monitor.read.sampler import Sampler
from monitor.sources.base import Reading
from monitor.sources.samples import EngineSample, GpuSample
from monitor.tui.app import HeadroomApp
from monitor.tui.feeds import LocalFeed
from monitor.tui.screens import EngineDetailScreen, GpuDetailScreen
from monitor.watch.pipeline import Monitor

pytestmark = pytest.mark.anyio


class EnergySource:
    """A GPU drawing 400 W (its counter says so) while the engine makes 2,000 tokens/s."""

    name = "energy"

    def __init__(self, mig: bool = False) -> None:
        self.start = time.monotonic()
        self.mig = mig

    def read(self) -> Reading:
        t = time.monotonic() - self.start
        if self.mig:
            gpu = GpuSample(0, "MIG-0", "NVIDIA H200 MIG 3g.71gb", "nvml", util=0.9,
                            mig_parent=0, mig_instance=1)  # fmt: skip
        else:
            gpu = GpuSample(0, "GPU-0", "NVIDIA H200", "nvml", util=0.9, power_watts=400.0,
                            energy_joules=400.0 * t, energy_source="counter")  # fmt: skip
        engine = EngineSample(
            "http://127.0.0.1:8000/metrics", "m", "0", running=20.0, waiting=0.0,
            generation_tokens_total=2000.0 * t, request_success_total=10.0 * t,
        )  # fmt: skip
        return Reading(gpus=(gpu,), engines=(engine,))

    def close(self) -> None:
        pass


async def _screens(source: EnergySource) -> tuple[str, str]:
    sampler = Sampler([source], interval=0.2)
    monitor = Monitor(sampler, Diagnoser(gpu_hour_price=3.6), window_s=2.0)
    app = HeadroomApp(LocalFeed(monitor))
    async with app.run_test(size=(140, 60)) as pilot:
        await wait_frames(app, pilot, 8)
        engine = await open_screen(app, pilot, EngineDetailScreen, "e")
        return engine, await open_screen(app, pilot, GpuDetailScreen, "escape", "g")


def _row(text: str, label: str) -> str:
    return next(ln for ln in text.splitlines() if ln.strip().startswith(label))


async def test_engine_and_gpu_screens_show_energy_per_token_and_cost() -> None:
    engine, gpu = await _screens(EnergySource())
    row = _row(engine, "energy")
    # 400 W over 2,000 tokens/s and 10 requests/s; $3.60 an hour is $1e-3 a second.
    assert "0.2 J/token" in row and "40 J/request" in row and "5 tokens/J" in row
    assert "GPUs 400 W" in row and "$0.5 per M tokens" in row
    row = _row(gpu, "energy")
    assert "(400 W), from the energy counter" in row


async def test_a_mig_instance_shows_a_dash_and_why() -> None:
    engine, gpu = await _screens(EnergySource(mig=True))
    assert "- (no energy reading for gpu:0/mig:1)" in _row(engine, "energy")
    assert "- (no energy or power reading" in _row(gpu, "energy")
