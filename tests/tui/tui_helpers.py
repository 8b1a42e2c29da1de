"""Helpers the TUI tests share (a module with a unique name: pytest puts this folder on sys.path)."""

from __future__ import annotations

from pathlib import Path

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
