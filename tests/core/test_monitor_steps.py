"""The Monitor's pace: the window takes every reading, verdicts come once a step, and the
report is built when someone reads it."""

from __future__ import annotations

from core_support import engine_snapshot

import monitor.watch.pipeline as pipeline
from monitor.read.sampler import Sampler
from monitor.sources.samples import Snapshot
from monitor.watch.pipeline import Monitor


def _snap(t: float, done: float, running: float = 8.0, waiting: float = 0.0) -> Snapshot:
    return engine_snapshot(t, done, running, waiting=waiting)


def test_fast_ticks_are_diagnosed_once_a_step_but_windowed_every_tick() -> None:
    sampler = Sampler([], interval=0.1)
    monitor = Monitor(sampler, window_s=2.0, diagnose_every_s=1.0)
    steps: list[float] = []
    monitor.listeners.append(lambda d, w: steps.append(w.end))
    for i in range(31):  # 3 s of 100 ms ticks, 10 requests a second
        sampler.push(_snap(round(i * 0.1, 1), float(i)))
    assert steps == [0.0, 1.0, 2.0, 3.0]
    window = monitor.window()
    assert (
        window is not None and window.engines[0].samples == 22
    )  # every tick of the 2 s, and one before
    report = monitor.report()
    assert report is not None
    assert report["engines"][0]["requests_per_s"] == 10.0


def test_the_report_is_built_once_per_step_and_only_when_read(monkeypatch) -> None:
    built: list[int] = []
    real = pipeline.build_report

    def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        built.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(pipeline, "build_report", counting)
    sampler = Sampler([], interval=1.0)
    monitor = Monitor(sampler, window_s=5.0)
    for i in range(10):
        sampler.push(_snap(float(i), float(i)))
    assert built == []  # nobody asked
    first = monitor.report()
    assert monitor.report() is first and len(built) == 1
    sampler.push(_snap(10.0, 10.0))
    assert monitor.report() is not first and len(built) == 2


def test_a_longer_window_takes_readings_already_in_the_ring() -> None:
    """Widening (or a restart to a longer window) re-reads the ring: the window holds what
    a full recomputation over the ring would."""
    sampler = Sampler([], interval=1.0)
    monitor = Monitor(sampler, window_s=2.0)
    for i in range(10):
        sampler.push(_snap(float(i), float(2 * i)))
    assert monitor.window().engines[0].samples == 4  # type: ignore[union-attr]
    monitor.window_s = 6.0
    sampler.push(_snap(10.0, 20.0))
    window = monitor.window()
    assert window is not None and window.engines[0].samples == 8
    assert window == sampler.window(6.0)


def _plateau(t: float) -> Snapshot:
    # Eight running, twenty waiting, two requests done a second: a sequence cap.
    return _snap(t, 2.0 * t, waiting=20.0)


def _run(read_every_tick: bool) -> tuple[list[tuple[float, list[tuple[str, float]]]], list]:
    sampler = Sampler([], interval=1.0)
    monitor = Monitor(sampler, window_s=10.0, diagnose_every_s=5.0)
    steps: list[tuple[float, list[tuple[str, float]]]] = []
    monitor.listeners.append(
        lambda d, w: steps.append((w.end, [(v.cause, v.confidence) for v in d.verdicts]))
    )
    reads = []
    for i in range(16):
        sampler.push(_plateau(float(i)))
        if read_every_tick:
            window, diagnosis = monitor.window(), monitor.diagnosis()
            assert window is not None and diagnosis is not None
            reads.append((window.end, diagnosis))
    return steps, reads


def test_a_reader_between_steps_gets_the_latest_reading_and_counts_no_hold() -> None:
    quiet, _ = _run(read_every_tick=False)
    steps, reads = _run(read_every_tick=True)
    # The steps, what listeners hear, come every 5 s and say the same whoever reads.
    assert [t for t, _ in steps] == [0.0, 5.0, 10.0, 15.0]
    assert steps == quiet
    # Each read is the newest reading judged: the cap is seen from the second reading on...
    assert [t for t, _ in reads] == [float(i) for i in range(16)]
    lead = [(d.verdicts[0].cause, d.verdicts[0].confidence) for _, d in reads]
    assert all(cause == "seq-cap" for cause, _ in lead[1:])
    # ...pending (confidence scaled down) until a step has counted it once and the next
    # reading holds it again: reads at 1-4 s counted nothing.
    stable = max(c for _, c in lead)
    assert [c < stable for _, c in lead[1:]] == [True] * 5 + [False] * 10
    # Dated from its first sight, by a read at 1 s, not from the step that first counted it.
    assert {d.verdicts[0].since for _, d in reads[1:]} == {1_800_000_001.0}


def test_readers_at_once_between_steps_share_one_judgement() -> None:
    # Fifty scrapes arriving together judge the newest reading once, not fifty times.
    import threading

    from monitor.diagnosis import Diagnoser

    class Counting(Diagnoser):
        peeks = 0

        def peek(self, window):  # type: ignore[no-untyped-def]
            Counting.peeks += 1
            return super().peek(window)

    sampler = Sampler([], interval=1.0)
    monitor = Monitor(sampler, Counting(), window_s=10.0, diagnose_every_s=5.0)
    for i in range(3):
        sampler.push(_plateau(float(i)))
    start = threading.Barrier(50)
    got: list[float] = []

    def read() -> None:
        start.wait()
        report = monitor.report()
        assert report is not None
        got.append(report["time"])

    threads = [threading.Thread(target=read) for _ in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == [1_800_000_002.0] * 50
    assert Counting.peeks == 1
