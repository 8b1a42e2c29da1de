"""The engine screen shows the what-if: the recorded seq-cap story of the real-time simulator,
its reports recomputed by today's diagnosis."""

from __future__ import annotations

from pathlib import Path

import pytest
from tui_helpers import visible

from monitor.tui.app import HeadroomApp
from monitor.tui.feeds import ReplayFeed
from monitor.tui.screens import EngineDetailScreen

pytestmark = pytest.mark.anyio
RECORDING = Path(__file__).resolve().parents[1] / "fixtures" / "recordings" / "seq-cap.jsonl"


async def test_the_engine_screen_says_what_raising_the_cap_buys() -> None:
    feed = ReplayFeed(RECORDING, speed=0)
    app = HeadroomApp(feed, autostart=False, preload=feed.total)
    async with app.run_test(size=(120, 60)) as pilot:
        await pilot.pause()
        await pilot.press("e")
        assert isinstance(app.screen, EngineDetailScreen)
        await pilot.pause()
        text = visible(app)
        assert "what-if  raise --max-num-seqs 8 -> 16: ~1.9x tokens/s, then seq-cap at ~16" in text
        await pilot.press("q")
