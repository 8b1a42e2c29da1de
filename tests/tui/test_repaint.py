"""What watch writes to the terminal from tick to tick (bytes on an SSH link), through the pilot.

The screen's compositor is watched as Textual hands it each update: the spans it
repaints, rendered as the app renders them, are what a terminal receives, so these tests
see the same repaints a user pays for.
"""

from __future__ import annotations

import math
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.strip import Strip
from textual.visual import Visual
from tui_helpers import record_story

from monitor.tui.app import HeadroomApp
from monitor.tui.feeds import Frame, ReplayFeed
from monitor.tui.fmt import SPARK_COLUMN_S
from monitor.tui.widgets import SHRINK_AFTER, DiagnosisPanel, GpuPanel, Panel, spark_width

pytestmark = pytest.mark.anyio


@pytest.fixture
def seq_cap(tmp_path: Path) -> Path:
    path = tmp_path / "seq-cap.jsonl"
    record_story(path, "seq-cap")
    return path


@asynccontextmanager
async def watching(path: Path, preload: int) -> AsyncIterator[tuple[HeadroomApp, Pilot[Any]]]:
    """watch replaying the story at 120x40, laid out, its panels drawn at their width."""
    app = HeadroomApp(ReplayFeed(path, speed=0), autostart=False, preload=preload)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        app._publish()  # panels drawn before the first layout are drawn again at their width
        await pilot.pause()
        yield app, pilot


def last_report(app: HeadroomApp) -> dict[str, Any]:
    latest = app._latest
    assert latest is not None and latest.report is not None
    return latest.report


async def replay_rest(
    app: HeadroomApp, pilot: Pilot[Any], each: Callable[[], None] = lambda: None
) -> None:
    """Steps the rest of the story, each() after every frame."""
    feed = app.feed
    assert isinstance(feed, ReplayFeed)
    while (frame := feed.step()) is not None:
        app.apply_frame(frame, publish=True)
        await pilot.pause()
        each()


async def jump_every_figure(app: HeadroomApp, pilot: Pilot[Any]) -> None:
    """Every figure moves at once (halved), and time jumps past a sparkline column."""
    base = last_report(app)
    g = {k: v * 0.5 if isinstance(v, float) else v for k, v in base["gpus"][0].items()}
    t = base["time"] + 3 * SPARK_COLUMN_S
    app.apply_frame(Frame({**base, "time": t, "gpus": [g]}), publish=True)
    await pilot.pause()


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
    async with watching(seq_cap, preload=1000) as (app, pilot):
        gpu = app.screen.query_one(GpuPanel)
        box = gpu.content_region
        meters = range(box.y, box.y + 5)  # duty, SM act, occup, tensor, DRAM
        spark_x = box.right - spark_width(box.width)
        base = last_report(app)
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


class Terminal:
    """The few escape sequences Textual's updates use, applied to a grid of cells: each cell
    holds its character and the colours (SGR parameters) it was written with."""

    SEQ = re.compile(r"\x1b\[(\d+);(\d+)H|\x1b\[([\d;]*)m|\n|([^\x1b\n])")

    def __init__(self, width: int, height: int) -> None:
        self.cells = [[(" ", ())] * width for _ in range(height)]
        self.x = self.y = 0
        self.sgr: tuple[str, ...] = ()
        self.written = 0  # cells written since the last count

    def feed(self, data: str) -> None:
        for m in self.SEQ.finditer(data):
            row, col, sgr, ch = m.groups()
            if row is not None:
                self.y, self.x = int(row) - 1, int(col) - 1
            elif sgr is not None:
                params = tuple(p for p in sgr.split(";") if p)
                # "0;..." resets then sets (this module's); Textual's follow a reset.
                if not params or params[0] == "0":
                    self.sgr = params[1:]
                else:
                    self.sgr = self.sgr + params
            elif ch is not None:
                self.cells[self.y][self.x] = (ch, self.sgr)
                self.x += 1
                self.written += 1

    def count(self) -> int:
        n, self.written = self.written, 0
        return n


class Wire:
    """What the screen's compositor sends, fed to a Terminal, with the bytes of each update."""

    def __init__(self, app: HeadroomApp, monkeypatch: pytest.MonkeyPatch) -> None:
        comp = app.screen._compositor  # type: ignore[attr-defined]
        self.term = Terminal(comp.size.width, comp.size.height)
        self.term.feed(comp.render_update(full=True).render_segments(app.console))
        self.term.count()
        self.bytes = 0
        partial, full = comp.render_partial_update, comp.render_full_update

        def spy(render: Any) -> Any:
            def go(*a: Any, **kw: Any) -> Any:
                update = render(*a, **kw)
                if update is not None:
                    data = update.render_segments(app.console)
                    self.bytes += len(data.encode())
                    self.term.feed(data)
                return update

            return go

        monkeypatch.setattr(comp, "render_partial_update", spy(partial))
        monkeypatch.setattr(comp, "render_full_update", spy(full))
        self.app, self.comp = app, comp

    def take(self) -> tuple[int, int]:
        """(bytes, cells) sent since the last take."""
        n, self.bytes = self.bytes, 0
        return n, self.term.count()

    def as_drawn_whole(self) -> list[list[tuple[str, tuple[str, ...]]]]:
        """The screen as a full repaint draws it now."""
        whole = Terminal(self.comp.size.width, self.comp.size.height)
        whole.feed(self.comp.render_update(full=True).render_segments(self.app.console))
        return whole.cells


async def test_partial_updates_leave_the_screen_a_full_repaint_would_draw(
    seq_cap: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Updates that write only the changed cells (and set colours only where they change)
    leave on the terminal, cell for cell and colour for colour, what a whole repaint draws:
    figures, bars, sparklines and verdicts change over a story and a jump in every figure."""
    async with watching(seq_cap, preload=4) as (app, pilot):
        wire = Wire(app, monkeypatch)
        await replay_rest(app, pilot)
        assert wire.take()[0] > 0
        assert wire.term.cells == wire.as_drawn_whole()
        await jump_every_figure(app, pilot)
        assert wire.take()[1] > 0
        assert wire.term.cells == wire.as_drawn_whole()


async def test_a_changed_figure_writes_its_cells_not_its_line(
    seq_cap: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tick where only the duty cycle moves (20 points) and the clock's seconds: the
    terminal gets the bar's end, the figure and the seconds, not each line from its left
    edge; a tick where only the clock moves costs a few dozen bytes."""
    async with watching(seq_cap, preload=1000) as (app, pilot):
        base = last_report(app)
        gpu = base["gpus"][0]
        wire = Wire(app, monkeypatch)

        async def tick(t: float, util: float) -> tuple[int, int]:
            gpus = [{**gpu, "util": util}, *base["gpus"][1:]]
            app.apply_frame(Frame({**base, "time": t, "gpus": gpus}), publish=True)
            await pilot.pause()
            return wire.take()

        # Inside one sparkline column, so that no sparkline shifts.
        start = math.floor(base["time"] / SPARK_COLUMN_S) * SPARK_COLUMN_S + 1.2
        await tick(start, gpu["util"])
        wire.take()
        # The clock alone: a cursor move, its colours, one or two digits.
        sent, cells = await tick(start + 1, gpu["util"])
        assert 0 < cells <= 2 and sent <= 50
        # The duty line: the bar moves by 20% of its ~60 cells, plus the figure and the clock.
        # Written from the left edge, the line alone would be ~90 cells and 300+ bytes.
        sent, cells = await tick(start + 2, gpu["util"] - 0.2)
        assert cells <= 30 and sent <= 160
        assert wire.term.cells == wire.as_drawn_whole()


async def test_a_verdict_is_repainted_when_its_figures_move_not_when_they_jitter(
    seq_cap: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The diagnosis's figures are a window's means: one crossing a rounding edge (40 to 41
    requests waiting, 40.0 to 40.6 in the evidence) leaves the verdict as shown; a real
    move (to 48) shows summary, evidence and fix together, as the diagnosis gave them."""
    async with watching(seq_cap, preload=1000) as (app, pilot):
        base = last_report(app)
        top = base["verdicts"][0]
        assert "40 requests wait" in top["summary"] and "40 wait" in top["fix"]
        box = app.screen.query_one(DiagnosisPanel).content_region
        wire = Wire(app, monkeypatch)

        def shown() -> str:
            rows = wire.term.cells[box.y : box.bottom]
            return "\n".join("".join(ch for ch, _ in row) for row in rows)

        async def tick(t: float, waiting: float) -> None:
            n = f"{waiting:.0f}"
            ev = [
                {**e, "value": waiting} if e["name"] == "waiting_mean" else e
                for e in top["evidence"]
            ]
            v = {
                **top,
                "summary": top["summary"].replace("40 requests", f"{n} requests"),
                "fix": top["fix"].replace("40 wait", f"{n} wait"),
                "evidence": ev,
            }
            app.apply_frame(Frame({**base, "time": t, "verdicts": [v]}), publish=True)
            await pilot.pause()

        t = base["time"]
        await tick(t + 0.1, 40.0)
        before = shown()
        for i, w in enumerate((40.4, 40.6, 40.2, 39.6)):
            await tick(t + 0.2 + 0.1 * i, w)
            assert shown() == before
        await tick(t + 0.7, 48.0)
        after = shown()
        assert "48 requests wait" in after and "48 wait" in after and "40 requests" not in after
        assert wire.term.cells == wire.as_drawn_whole()


async def test_a_panel_one_line_shorter_keeps_its_height_a_while(
    seq_cap: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A diagnosis that loses a line (and gets it back, as a wrapped line does when a digit
    comes and goes) keeps its height, with a blank line: the panels below are not laid out
    and written again. Shorter for SHRINK_AFTER draws in a row, it shrinks."""
    async with watching(seq_cap, preload=1000) as (app, pilot):
        base = last_report(app)
        top = base["verdicts"][0]
        diagnosis = app.screen.query_one(DiagnosisPanel)
        t = base["time"]

        async def tick(missing: list[str]) -> tuple[int, set[int]]:
            nonlocal t
            t += 0.01  # inside one sparkline column
            v = {**top, "missing": missing}
            app.apply_frame(Frame({**base, "time": t, "verdicts": [v]}), publish=True)
            await pilot.pause()
            rows = {y for y, _, _ in painted.take()}
            return diagnosis.outer_size.height, rows

        painted = Painted(app, monkeypatch)
        tall, _ = await tick(["dcgm"])  # "(less sure: no dcgm)" under the verdict
        below = app.screen.query_one(GpuPanel).region.y
        for missing in ([], ["dcgm"], [], []):
            height, rows = await tick(missing)
            assert height == tall
            assert not [y for y in rows if y >= below]
        for _ in range(SHRINK_AFTER):
            height, rows = await tick([])
        assert height == tall - 1
        assert "less sure" not in "".join(line.plain for line in diagnosis._drawn[2])


async def test_panels_render_the_lines_textual_renders_of_the_whole_text(
    seq_cap: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Panels render each text line alone and keep its strips while it stays: over a story
    and a jump in every figure, every panel's lines are, segment for segment, what Textual
    renders of the panel's whole text."""
    async with watching(seq_cap, preload=4) as (app, pilot):

        def check() -> None:
            n = 0
            for panel in app.screen.query(Panel):
                width, height = panel.size
                whole = Visual.to_strips(panel, panel._render(), width, height, panel.visual_style)
                lines = [panel.render_line(y) for y in range(height)]
                blank = Strip.blank(width, panel.visual_style.rich_style)
                assert lines == whole + [blank] * (height - len(whole)), type(panel).__name__
                n += panel._screen_strips is not None  # rendered line by line
            assert n >= 3

        await replay_rest(app, pilot, each=check)
        await jump_every_figure(app, pilot)
        check()
