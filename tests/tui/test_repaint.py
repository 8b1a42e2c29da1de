"""What watch writes to the terminal from tick to tick (bytes on an SSH link), through the pilot.

The screen's compositor is watched as Textual hands it each update: the spans it
repaints are what a terminal receives (Textual writes a span from the left edge of the
widget to the span's right end), so these tests see the same repaints a user pays for.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from tui_helpers import record_story

from monitor.tui.app import HeadroomApp
from monitor.tui.feeds import Frame, ReplayFeed
from monitor.tui.fmt import SPARK_COLUMN_S
from monitor.tui.widgets import GpuPanel, spark_width

pytestmark = pytest.mark.anyio


@pytest.fixture
def seq_cap(tmp_path: Path) -> Path:
    path = tmp_path / "seq-cap.jsonl"
    record_story(path, "seq-cap")
    return path


class Painted:
    """The (row, first column, end column) spans of every update the screen paints."""

    def __init__(self, app: HeadroomApp, monkeypatch: pytest.MonkeyPatch) -> None:
        self.spans: list[tuple[int, int, int]] = []
        self.bytes = 0
        comp = app.screen._compositor  # type: ignore[attr-defined]
        partial, full = comp.render_partial_update, comp.render_full_update

        def spy_partial() -> Any:
            update = partial()
            if update is not None:
                self.spans += update.spans
                self.bytes += len(update.render_segments(app.console).encode())
            return update

        def spy_full(*a: Any, **kw: Any) -> Any:
            self.spans += [(y, 0, comp.size.width) for y in range(comp.size.height)]
            self.bytes += 10**6
            return full(*a, **kw)

        monkeypatch.setattr(comp, "render_partial_update", spy_partial)
        monkeypatch.setattr(comp, "render_full_update", spy_full)

    def take(self) -> list[tuple[int, int, int]]:
        spans, self.spans, self.bytes = self.spans, [], 0
        return spans


async def test_sparklines_move_only_when_a_column_completes(
    seq_cap: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reading that completes no sparkline column leaves the sparklines' cells unwritten,
    a point of jitter leaves the bar alone, a real change repaints its line short of the
    sparkline, and the reading that completes a column shifts the sparklines."""
    app = HeadroomApp(ReplayFeed(seq_cap, speed=0), autostart=False, preload=1000)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        app._publish()  # panels drawn before the first layout are drawn again at their width
        await pilot.pause()
        gpu = app.screen.query_one(GpuPanel)
        box = gpu.content_region
        meters = range(box.y, box.y + 5)  # duty, SM act, occup, tensor, DRAM
        spark_x = box.right - spark_width(box.width)
        latest = app._latest
        assert latest is not None and latest.report is not None
        base = latest.report
        util = base["gpus"][0]["util"]
        painted = Painted(app, monkeypatch)

        async def tick(t: float, u: float) -> list[tuple[int, int, int]]:
            gpus = [{**base["gpus"][0], "util": u}, *base["gpus"][1:]]
            app.apply_frame(Frame({**base, "time": t, "gpus": gpus}), publish=True)
            await pilot.pause()
            return [s for s in painted.take() if s[0] in meters]

        def reach_sparkline(spans: list[tuple[int, int, int]]) -> bool:
            return any(x2 > spark_x for _, _, x2 in spans)

        # The first reading past a column's end completes that column: the sparklines shift.
        start = (math.floor(base["time"] / SPARK_COLUMN_S) + 1) * SPARK_COLUMN_S
        assert reach_sparkline(await tick(start + 0.5, util))
        # Readings inside the next column, jittering by less than a point: nothing written.
        for i in range(1, 9):
            assert await tick(start + 0.5 + i, util + (0.004 if i % 2 else -0.004)) == []
        # A real change inside the column: the duty line only, and not up to its sparkline.
        moved = await tick(start + 9.5, util - 0.2)
        assert moved and {y for y, _, _ in moved} == {box.y}
        assert not reach_sparkline(moved)
        # The next column's first reading shifts them again.
        assert reach_sparkline(await tick(start + 10.5, util - 0.2))
