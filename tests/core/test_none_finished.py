"""Requests that outlast the window: no request finished, so the request rate is a dash with its
reason, never 0 req/s, and a window that widens by itself widens until one finishes (issue 28:
the demo's cpu-bound and memory-bound boxes read "req/s 0", "0 req/s", "x - = -")."""

from __future__ import annotations

import dataclasses

from core_support import engine_snapshot

from monitor.read.sampler import Sampler
from monitor.sources.samples import Snapshot
from monitor.text.capacity import capacity_words, headroom_words
from monitor.watch.pipeline import Monitor
from monitor.watch.report import render_text


def _snap(t: float, done: float) -> Snapshot:
    return engine_snapshot(t, done, 32.0, preemptions_total=0.0, reported_max_num_seqs=256)


def test_no_request_finished_reads_a_dash_and_says_why() -> None:
    sampler = Sampler([], interval=1.0)
    monitor = Monitor(sampler, window_s=5.0)
    for i in range(8):
        sampler.push(_snap(i, 100.0))  # 32 running, none finishing
    report = monitor.report()
    assert report is not None
    e = report["engines"][0]
    a = e["analysis"]
    assert e["requests_per_s"] is None and a["requests_per_s"] is None
    assert a["littles_unjudged"] == "none-finished"
    assert a["headroom"]["limit"] == "seq-cap" and a["headroom"]["rate_at_limit_rps"] is None
    words = headroom_words(a["headroom"], True) + capacity_words(a)
    assert "0 req/s" not in words and "no request finished in the window" in words
    assert "- req/s" in words
    text = render_text(report)
    assert " 0 req/s" not in text and "no request finished in the window" in text


def test_a_window_that_widens_by_itself_widens_until_a_request_finishes() -> None:
    sampler = Sampler([], interval=1.0)
    monitor = Monitor(sampler, window_s=5.0, max_window_s=60.0)
    for i in range(12):
        sampler.push(_snap(i, 100.0))
    monitor.report()
    # Twice what the window held, step after step: 11 s of readings, a 22 s window.
    assert monitor.window_s >= 20.0
    for i in range(12, 60):
        sampler.push(_snap(i, 100.0))
    monitor.report()
    assert monitor.window_s == 60.0  # no further than the ceiling
    report = monitor.report()
    assert report is not None and report["window_s"] == 59.0


def test_a_fixed_window_does_not_widen() -> None:
    sampler = Sampler([], interval=1.0)
    monitor = Monitor(sampler, window_s=5.0)
    for i in range(12):
        sampler.push(_snap(i, 100.0))
    monitor.report()
    assert monitor.window_s == 5.0


def test_the_tui_little_line_says_none_finished_and_that_the_window_widens() -> None:
    from monitor.tui.widgets import littles_lines

    sampler = Sampler([], interval=1.0)
    monitor = Monitor(sampler, window_s=5.0, max_window_s=60.0)
    for i in range(8):
        sampler.push(_snap(i, 100.0))
    report = monitor.report()
    assert report is not None
    text = littles_lines(report["engines"][0], 120, self_widens=True).plain
    assert "in flight 32 vs - req/s" in text
    assert "no request finished in the window: widening it" in text
    assert "(0 finished)" not in text
    assert "- req/s would fill them (no request finished in the window)" in text


def test_an_idle_engine_says_why_no_rate_fills_its_slots() -> None:
    sampler = Sampler([], interval=1.0)
    monitor = Monitor(sampler, window_s=5.0)
    for i in range(8):
        e = dataclasses.replace(_snap(i, 100.0).engines[0], running=0.0)
        sampler.push(Snapshot(t=i, wall=1_800_000_000.0 + i, engines=(e,)))
    report = monitor.report()
    assert report is not None
    words = capacity_words(report["engines"][0]["analysis"])
    assert (
        words
        == "256 slots: - req/s would fill them (nothing ran in the window to time a request by)"
    )
