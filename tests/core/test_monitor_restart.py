"""Monitor.restart: a scenario switch starts windows afresh, so two boxes never share one window."""

from __future__ import annotations

from core_support import engine_snapshot

from monitor.read.sampler import Sampler
from monitor.sources.samples import Snapshot
from monitor.watch.pipeline import Monitor


def _snap(t: float, model: str, running: float, done: float) -> Snapshot:
    return engine_snapshot(t, done, running, model_name=model, preemptions_total=0.0)


def test_after_a_restart_the_window_holds_only_the_new_box() -> None:
    sampler = Sampler([], interval=1.0)
    monitor = Monitor(sampler, window_s=10.0, max_window_s=60.0)
    for i in range(8):
        sampler.push(_snap(i, "old-8b", 40.0, 100.0 + 5 * i))
    report = monitor.report()
    assert report is not None and [e["model_name"] for e in report["engines"]] == ["old-8b"]
    monitor.restart(window_s=5.0)
    for i in range(8, 11):
        sampler.push(_snap(i, "new-1b", 4.0, float(i - 8)))
    report = monitor.report()
    assert report is not None
    assert [e["model_name"] for e in report["engines"]] == ["new-1b"]
    # The new box's counters start at its first reading: one request a second, not a reset.
    assert report["engines"][0]["requests_per_s"] == 1.0
    assert report["window_s"] == 2.0 and monitor.window_s == 5.0
    assert report["window_widens_to_s"] == 60.0
