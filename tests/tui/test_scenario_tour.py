"""Engines and GPUs that come and go: every scenario of the demo, by digit and by `s`, in more than one order.

The demo once crashed (DuplicateIds) on the second scenario switch: panels
were named by a count while removed ones were still mounted. These tests
switch in orders that bring panels back before the old ones are gone.
"""

from __future__ import annotations

import asyncio
import copy
import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from tui_helpers import FIXTURES

from monitor.tui.app import HeadroomApp
from monitor.tui.feeds import Frame, ReplayFeed
from monitor.tui.fmt import engine_key
from monitor.tui.screens import MainScreen
from monitor.tui.widgets import EnginePanel, GpuPanel

pytestmark = pytest.mark.anyio


def _last_report(name: str) -> dict[str, Any]:
    lines = (FIXTURES / f"{name}.jsonl").read_text().splitlines()
    return json.loads(lines[-1])["report"]


def _box(base: Mapping[str, Any], models: list[str], gpus: int) -> dict[str, Any]:
    """A report of `gpus` GPUs and one engine per model, figures taken from a real recording."""
    rep = copy.deepcopy(dict(base))
    g0, e0 = rep["gpus"][0], rep["engines"][0]
    rep["gpus"] = [{**g0, "index": i, "uuid": f"GPU-{i}"} for i in range(gpus)]
    rep["engines"] = [{**e0, "model_name": m} for m in models]
    return rep


def _shown(app: HeadroomApp) -> tuple[list[str], list[int]]:
    screen = app.screen
    assert isinstance(screen, MainScreen)
    engines = [p.key for p in screen.query(EnginePanel) if not p.leaving]
    gpus = [p.index for p in screen.query(GpuPanel) if not p.leaving]
    return engines, gpus


# (engine models in the window, GPUs): a scenario switch passes through a window that holds
# both the old engine and the new one, and the 8-GPU box comes and goes.
TOUR = [
    (["a"], 1),
    (["a", "b"], 1),
    (["b"], 8),
    (["b", "a"], 8),
    (["a"], 1),
    (["a", "c"], 8),
    (["c"], 1),
    (["c", "b", "a"], 8),
    (["b"], 1),
]


@pytest.mark.parametrize("settle", [True, False], ids=["settled", "back-to-back"])
@pytest.mark.parametrize("order", ["forward", "backward"])
async def test_panels_follow_engines_and_gpus_that_come_and_go(settle: bool, order: str) -> None:
    base = _last_report("seq-cap")
    steps = TOUR if order == "forward" else TOUR[::-1]
    feed = ReplayFeed(FIXTURES / "seq-cap.jsonl", speed=0)
    app = HeadroomApp(feed, autostart=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        for models, gpus in steps:
            app.apply_frame(Frame(_box(base, models, gpus)), publish=True)
            if settle:
                await pilot.pause()
        await pilot.pause()
        # One more frame after everything settled: the panels match the last window exactly.
        models, gpus = steps[-1]
        app.apply_frame(Frame(_box(base, models, gpus)), publish=True)
        await pilot.pause()
        await pilot.pause()
        engines, shown_gpus = _shown(app)
        assert sorted(engines) == sorted(
            engine_key({**base["engines"][0], "model_name": m}) for m in models
        )
        assert sorted(shown_gpus) == list(range(gpus))


# Each switch waits a window and two readings past it (5 readings, 1.0 s; 1.4 s with a 1 s
# window): a shorter window still holds the old engine beside the new one at the next
# switch, and readings at the same pace cost the app no more frames to draw.
WINDOW_S, INTERVAL_S = 0.6, 0.2


def _switch_and_wait(app: HeadroomApp, name: str, timeout: float = 45.0) -> None:
    """Block (off the event loop) until the switch to `name` landed and the window moved past it.

    Waiting a whole window matters: the crash came when a window still held the old
    engine beside the new one and the next switch brought a third.
    """
    ctl = app.scenarios
    assert ctl is not None
    deadline = time.monotonic() + timeout
    while ctl.current != name:
        assert time.monotonic() < deadline, f"the demo never switched to {name}"
        time.sleep(0.05)
    seen = app.frames_seen
    while app.frames_seen < seen + WINDOW_S / INTERVAL_S + 2:
        assert time.monotonic() < deadline, f"no reading came after switching to {name}"
        time.sleep(0.05)


async def test_demo_tours_every_scenario_by_digit_and_by_s(tmp_path: Path) -> None:
    """The real simulator behind the demo's own wiring; each switch waited for, in two orders."""
    from headroom.commands.demo import SimScenarios
    from monitor.read.sampler import Sampler
    from monitor.sources.dcgm_exporter import DcgmExporterSource
    from monitor.sources.vllm import VllmSource
    from monitor.tui.feeds import LocalFeed
    from monitor.watch.pipeline import Monitor
    from simulator import SCENARIOS, start_sim

    names = list(SCENARIOS)
    handle = start_sim(scenario=names[0], port=0, load=True)
    try:
        sampler = Sampler(
            [VllmSource(handle.metrics_url), DcgmExporterSource(handle.gpu_metrics_url)],
            interval=INTERVAL_S,
        )
        feed = LocalFeed(Monitor(sampler, window_s=WINDOW_S), label="simulator")
        ctl = SimScenarios(handle, names, names[0])
        app = HeadroomApp(feed, scenarios=ctl, record_path=tmp_path / "unused.jsonl")
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            # By `s` through all of them, then by digit, backward.
            for _ in range(len(names)):
                want = names[(names.index(ctl.current) + 1) % len(names)]
                await pilot.press("s")
                await asyncio.to_thread(_switch_and_wait, app, want)
                await pilot.pause()
            for i in range(9, 0, -1):
                await pilot.press(str(i))
                await asyncio.to_thread(_switch_and_wait, app, names[i - 1])
                await pilot.pause()
            assert isinstance(app.screen, MainScreen)
            engines, _ = _shown(app)
            assert engines, "no engine panel after the tour"
            await pilot.press("q")
    finally:
        handle.stop()
