"""What a newcomer meets in the demo's first minutes: keys that work, a screen that fits, files put away."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from test_app import paused_app, visible
from tui_helpers import record_story

from monitor.tui.app import HeadroomApp
from monitor.tui.feeds import ReplayFeed
from monitor.tui.fmt import clock
from monitor.tui.screens import EngineDetailScreen, HelpScreen, gap_words

pytestmark = pytest.mark.anyio
TEN = (
    "idle starved seq-cap kv-cap token-cap cpu-bound launch-bound compute-bound "
    "memory-bound comm-bound"
).split()


class TenScenarios:
    def __init__(self) -> None:
        self.names = tuple(TEN)
        self.current = TEN[0]

    def set(self, name: str) -> None:
        self.current = name


@pytest.fixture
def seq_cap(tmp_path: Path) -> Path:
    path = tmp_path / "seq-cap.jsonl"
    record_story(path, "seq-cap")
    return path


async def test_enter_opens_a_detail_screen_without_tab_first(seq_cap: Path) -> None:
    app = paused_app(seq_cap)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, EngineDetailScreen)


async def test_at_80x24_the_clock_and_help_stay_and_the_help_fits(seq_cap: Path, utc: None) -> None:
    app = paused_app(seq_cap, scenarios=TenScenarios())
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        lines = visible(app).splitlines()
        assert clock(app.view.report["time"]) in lines[0]  # type: ignore[index]
        assert "window" in lines[0] and "scenario idle" in lines[0]
        assert "Help" in lines[-1]
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        box = app.screen.query_one("#help-box")
        assert box.outer_size.height <= 24
        # The scenario list (digit per scenario, 0 for the tenth) is reached by scrolling.
        for _ in range(30):
            await pilot.press("down")
        await pilot.pause()
        shown = visible(app)
        assert "0  comm-bound" in shown


async def test_each_digit_picks_its_scenario_and_zero_the_tenth(seq_cap: Path) -> None:
    ctl = TenScenarios()
    app = paused_app(seq_cap, scenarios=ctl)
    async with app.run_test(size=(100, 30)) as pilot:
        for key, name in [("3", "seq-cap"), ("0", "comm-bound"), ("9", "memory-bound")]:
            await pilot.press(key)
            await app.workers.wait_for_complete()
            assert ctl.current == name


async def test_r_records_under_the_state_directory_and_says_where(
    seq_cap: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.chdir(tmp_path)
    app = HeadroomApp(ReplayFeed(seq_cap, speed=0), autostart=False, preload=3)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("r")
        await pilot.pause()
        rec = app.feed.recorder
        assert rec is not None
        assert rec.path.parent == tmp_path / "state" / "headroom" / "recordings"
        await pilot.press("r")
    # Nothing lands in the current directory.
    assert sorted(os.listdir(tmp_path)) == ["seq-cap.jsonl", "state"]


def test_the_gap_between_duty_and_sm_active_is_named_by_what_the_gpu_does() -> None:
    memory_bound = {"cause": "memory-bound", "scope": "gpu:0"}
    assert "launch" not in gap_words(0.98, 0.87, None)  # an 11-point gap is small
    assert gap_words(0.98, 0.87, memory_bound).startswith("memory-bound")
    assert "launch-bound" in gap_words(0.6, 0.05, None)
    assert "too small to fill" in gap_words(0.99, 0.29, None)


async def test_the_engine_detail_shows_the_cache_keys_that_matter_and_c_shows_the_rest(
    tmp_path: Path,
) -> None:
    from tui_helpers import FIXTURES

    app = HeadroomApp(
        ReplayFeed(FIXTURES / "seq-cap.jsonl", speed=0), autostart=False, preload=1000
    )
    async with app.run_test(size=(140, 60)) as pilot:
        await pilot.pause()
        await pilot.press("e")
        await pilot.pause()
        assert isinstance(app.screen, EngineDetailScreen)
        text = visible(app)
        assert "num_gpu_blocks=28693" in text and "mamba_cache_mode" not in text
        assert "more: c shows them" in text
        await pilot.press("c")
        await pilot.pause()
        assert "mamba_cache_mode=none" in visible(app)


async def test_every_panel_shows_the_same_request_rate() -> None:
    """The starved demo once said "now 1.4 req/s" in its fix and "now 0.4 req/s" a few lines
    below: the engine panel, the capacity line and the fix now show one figure."""
    import re

    from tui_helpers import FIXTURES

    app = HeadroomApp(
        ReplayFeed(FIXTURES / "starved.jsonl", speed=0), autostart=False, preload=1000
    )
    async with app.run_test(size=(200, 80)) as pilot:
        await pilot.pause()
        text = visible(app)
    assert app.view.report is not None and app.view.report["verdicts"][0]["cause"] == "starved"
    panel = re.findall(r"req/s (\d[\d.]*)", text)
    now = re.findall(r"now (\d[\d.]*) req/s", text)
    little = re.findall(r"vs (\d[\d.]*) req/s x", text)
    assert panel and len(now) >= 2 and little, text
    assert len(set(panel + now + little)) == 1, (panel, now, little)
