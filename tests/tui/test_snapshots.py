"""Screenshots of the main screen for four causes, from simulator recordings, at fixed sizes.

Deterministic: the app is built on a replay, paused on its last tick, with no
worker or timer running, and the clock zone pinned. Regenerate after a
deliberate change with `pytest tests/tui/test_snapshots.py --snapshot-update`
and look at the SVGs.
"""

from __future__ import annotations

import pytest
from tui_helpers import FIXTURES

from monitor.tui.app import HeadroomApp
from monitor.tui.feeds import ReplayFeed

SCENARIOS = ("starved", "seq-cap", "cpu-bound", "launch-bound")


def replay_app(scenario: str) -> HeadroomApp:
    # The recorded reports, not recomputed ones: these pictures test the UI, and must not
    # move when the diagnosis is tuned (test_replay_live covers recomputation).
    feed = ReplayFeed(FIXTURES / f"{scenario}.jsonl", speed=0, recompute=False)
    return HeadroomApp(feed, autostart=False, preload=feed.total)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_main_screen(snap_compare, utc: None, scenario: str) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(replay_app(scenario), terminal_size=(100, 30))


def test_main_screen_80x24(snap_compare, utc: None) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(replay_app("launch-bound"), terminal_size=(80, 24))


def test_main_screen_wide(snap_compare, utc: None) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(replay_app("seq-cap"), terminal_size=(160, 40))


def test_engine_detail(snap_compare, utc: None) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(replay_app("seq-cap"), terminal_size=(100, 30), press=["e"])


def test_main_screen_without_colour(snap_compare, utc: None, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # NO_COLOR: every bar still carries its percentage, every cause its words.
    monkeypatch.setenv("NO_COLOR", "1")
    assert snap_compare(replay_app("starved"), terminal_size=(80, 24))


def test_gpu_detail(snap_compare, utc: None) -> None:  # type: ignore[no-untyped-def]
    # Every meter of a GPU (duty, SM, tensor, DRAM, power and clock against their limits).
    assert snap_compare(replay_app("launch-bound"), terminal_size=(100, 34), press=["g"])
