"""Helpers the TUI tests share (a module with a unique name: pytest puts this folder on sys.path)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from tui_synthetic import snapshots

from monitor.read.recording import Recorder
from monitor.read.sampler import Sampler
from monitor.watch.pipeline import Monitor

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "recordings"


def record_story(path: Path, story: str, n: int = 12, **kw: object) -> list[list[str]]:
    """Run the hand-made story through a live Monitor, recording it; return the live verdict causes."""
    sampler = Sampler([], interval=1.0)
    monitor = Monitor(sampler, window_s=5.0)
    rec = Recorder(path, header={"interval_s": 1.0, "window_s": 5.0})
    causes = []
    for snap in snapshots(story, n, **kw):  # type: ignore[arg-type]
        sampler.push(snap)
        report = monitor.report()
        rec.write(snap, report)
        assert report is not None
        causes.append([v["cause"] for v in report["verdicts"]])
    rec.close()
    sampler.close()
    return causes


def visible(app: Any) -> str:
    """What the app's screen shows, as text, line by line."""
    strips = app.screen._compositor.render_strips()
    return "\n".join("".join(seg.text for seg in strip) for strip in strips)


async def wait_frames(app: Any, pilot: Any, frames: int, timeout: float = 20.0) -> None:
    """Until the app has drawn ``frames`` frames from its feed (or ``timeout`` s have passed)."""
    deadline = time.monotonic() + timeout
    while app.frames_seen < frames and time.monotonic() < deadline:
        await pilot.pause(0.1)


async def open_screen(app: Any, pilot: Any, screen: type, *keys: str) -> str:
    """Press ``keys``, check they opened ``screen``, and give what it shows."""
    await pilot.press(*keys)
    assert isinstance(app.screen, screen)
    await pilot.pause()
    return visible(app)
