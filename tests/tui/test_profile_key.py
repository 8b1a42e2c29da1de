"""`p` in the TUI: on a focused engine panel it profiles the engine; elsewhere it pauses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tui_helpers import record_story

from monitor.profiling.pyspy import ProfileError
from monitor.tui.app import HeadroomApp
from monitor.tui.feeds import ReplayFeed
from monitor.tui.screens import EngineDetailScreen
from monitor.tui.widgets import EnginePanel

pytestmark = pytest.mark.anyio

PROFILE = {
    "pid": 41, "tid": 42, "thread": "EngineCore", "samples": 250, "seconds": 5.0, "rate": 50,
    "functions": [{"function": "detokenize", "file": "vllm/v1/engine/detokenizer.py",
                   "line": 120, "self_share": 0.41, "total_share": 0.45}],
}  # fmt: skip


class ProfilingReplay(ReplayFeed):
    """A replay whose profile() answers as a live feed would (or refuses, when told to)."""

    refuse: str | None = None
    calls = 0

    def profile(self) -> dict[str, Any]:
        self.calls += 1
        if self.refuse:
            raise ProfileError(self.refuse)
        return PROFILE


def messages(app: HeadroomApp) -> list[str]:
    return [str(n.message) for n in app._notifications]  # type: ignore[attr-defined]


async def test_p_on_an_engine_profiles_it_and_elsewhere_pauses(tmp_path: Path) -> None:
    path = tmp_path / "seq-cap.jsonl"
    record_story(path, "seq-cap")
    feed = ProfilingReplay(path, speed=0)
    app = HeadroomApp(feed, autostart=False, preload=1000)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("p")  # nothing focused: pause, as before
        assert app.paused and feed.calls == 0
        await pilot.press("space")
        assert not app.paused
        while not isinstance(app.focused, EnginePanel):
            await pilot.press("tab")
        await pilot.press("p")
        await pilot.pause(0.3)
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert feed.calls == 1 and not app.paused
        assert "EngineCore: 41% in detokenize" in messages(app)
        # On the engine's detail screen p profiles too; a refusal shows as its one line.
        await pilot.press("enter")
        assert isinstance(app.screen, EngineDetailScreen)
        feed.refuse = "no permission to read process 41 (ptrace): ..."
        await pilot.press("p")
        await pilot.pause(0.3)
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert feed.calls == 2
        assert feed.refuse in messages(app)
