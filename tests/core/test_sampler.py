"""The sampler: monotonic deadlines, a bounded ring, and sources that fail without stopping it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from monitor.read.sampler import Sampler
from monitor.sources.base import Reading
from monitor.sources.samples import EngineSample, SourceError


class CountingSource:
    name = "vllm"

    def __init__(self, delay: float = 0.0) -> None:
        self.n = 0
        self.delay = delay
        self.closed = False

    def read(self) -> Reading:
        self.n += 1
        if self.delay:
            time.sleep(self.delay)
        return Reading(
            engines=(EngineSample(url="u", model_name="m", engine="0", running=float(self.n)),)
        )

    def close(self) -> None:
        self.closed = True


class BrokenSource:
    name = "broken"

    def read(self) -> Reading:
        raise RuntimeError("driver exploded")

    def close(self) -> None:
        pass


class FailingSource:
    name = "dcgm-exporter"

    def read(self) -> Reading:
        return Reading(errors=(SourceError("dcgm-exporter", "http://x", "connection refused"),))

    def close(self) -> None:
        pass


def test_ring_is_bounded_and_ordered() -> None:
    s = Sampler([CountingSource()], interval=1.0, capacity=5)
    for _ in range(12):
        s.tick()
    snaps = s.snapshots()
    assert len(snaps) == 5
    assert [e.engines[0].running for e in snaps] == [8, 9, 10, 11, 12]
    assert all(a.t <= b.t for a, b in zip(snaps, snaps[1:]))


def test_a_source_that_raises_becomes_an_error_and_others_still_read() -> None:
    good = CountingSource()
    s = Sampler([good, BrokenSource(), FailingSource()], interval=1.0)
    snap = s.tick()
    assert snap.engines and snap.engines[0].running == 1
    messages = {e.source: e.message for e in snap.errors}
    assert "driver exploded" in messages["broken"]
    assert messages["dcgm-exporter"] == "connection refused"


def test_slow_sources_are_read_side_by_side() -> None:
    s = Sampler([CountingSource(0.3), CountingSource(0.3), CountingSource(0.3)], interval=1.0)
    t0 = time.monotonic()
    s.tick()
    # three 0.3 s reads in sequence would take 0.9 s; generous margin for machine stalls
    assert time.monotonic() - t0 < 0.85
    s.close()


def test_run_ticks_on_deadlines_for_a_duration() -> None:
    s = Sampler([CountingSource()], interval=0.05)
    t0 = time.monotonic()
    s.run(duration=0.5)
    elapsed = time.monotonic() - t0
    n = len(s.snapshots())
    # ~11 ticks; a stall may skip deadlines but never bursts to catch up
    assert 3 <= n <= 12
    assert elapsed < 5


def test_overrun_skips_missed_deadlines_instead_of_bursting() -> None:
    fake_now = [0.0]

    def clock() -> float:
        return fake_now[0]

    class StallingSource(CountingSource):
        def read(self) -> Reading:
            r = super().read()
            fake_now[0] += 3.5 if self.n == 2 else 0.01  # tick 2 stalls for 3.5 intervals
            return r

    s = Sampler([StallingSource()], interval=1.0, clock=clock)
    waits: list[float] = []

    real_stop = s._stop

    class FakeEvent:
        def is_set(self) -> bool:
            return len(waits) >= 5

        def wait(self, timeout: float) -> bool:
            waits.append(timeout)
            fake_now[0] += timeout
            return False

        def clear(self) -> None:
            real_stop.clear()

    s._stop = FakeEvent()  # type: ignore[assignment]
    s.run()
    ticks = [x.t for x in s.snapshots()]
    gaps = [b - a for a, b in zip(ticks, ticks[1:])]
    # no gap much shorter than the interval after the stall: no catch-up volley
    assert min(gaps) > 0.4


def test_start_stop_and_listeners() -> None:
    src = CountingSource()
    s = Sampler([src], interval=0.02)
    seen = threading.Event()
    s.subscribe(lambda snap: seen.set())
    s.start()
    assert seen.wait(5)
    s.close()
    assert src.closed


def test_window_includes_baseline_before_start() -> None:
    s = Sampler([CountingSource()], interval=1.0)
    for _ in range(10):
        s.tick()
    w = s.window(seconds=0.0)
    # even a zero-length window keeps one earlier sample as the baseline for rates
    assert w.samples == 2


class GatedSource:
    """An engine page whose reads answer when the test says: a fault's slow page on demand."""

    name = "vllm"

    def __init__(self) -> None:
        self.calls = 0
        self.gates: dict[int, threading.Event] = {}  # call number -> held until set

    def read(self) -> Reading:
        self.calls += 1
        n = self.calls
        gate = self.gates.get(n)
        if gate is not None and not gate.wait(10):
            raise AssertionError("the test never let this read answer")
        if gate is not None:
            return Reading(errors=(SourceError("vllm", "u", f"read {n} timed out"),))
        return Reading(engines=(EngineSample(url="u", model_name="m", engine="0", running=n),))

    def close(self) -> None:
        pass


def _until(check: Callable[[], object], timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.005)


def test_a_read_that_outlasted_its_tick_is_asked_again_when_it_ends() -> None:
    """A page slower than a tick: one request in flight while it hangs, and once it ends
    the next tick asks afresh, so the first reading after the fault is that tick's."""
    src = GatedSource()
    src.gates[1] = threading.Event()
    s = Sampler([src], interval=1.0, max_wait_s=0.05)
    first = s.tick()
    assert not first.engines and src.calls == 1
    s.tick()  # still hanging: not asked twice
    assert src.calls == 1
    src.gates[1].set()
    _until(lambda: not s.stuck())
    s.max_wait_s = 5.0  # the fresh ask answers at once; room for a stalled machine
    after = s.tick()
    assert src.calls == 2
    assert [e.running for e in after.engines] == [2] and not after.errors
    s.close()


def test_when_the_fresh_ask_hangs_the_tick_takes_what_the_ended_read_got() -> None:
    src = GatedSource()
    src.gates[1], src.gates[2] = threading.Event(), threading.Event()
    s = Sampler([src], interval=1.0, max_wait_s=0.05)
    s.tick()
    src.gates[1].set()
    _until(lambda: not s.stuck())
    snap = s.tick()  # asks again (call 2 hangs): this tick says what call 1 ended with
    assert src.calls == 2
    assert [e.message for e in snap.errors] == ["read 1 timed out"] and not snap.engines
    assert [source.name for source, _ in s.stuck()] == ["vllm"]
    src.gates[2].set()
    _until(lambda: not s.stuck())
    s.max_wait_s = 5.0
    snap = s.tick()
    assert src.calls == 3 and [e.running for e in snap.engines] == [3]
    s.close()


def test_a_tick_waiting_on_a_slow_page_is_dated_when_its_own_sources_were_read() -> None:
    """The GPU and host readings of a tick that waits on a slow page are not dated at the
    wait's end: with ticks a second apart, their rates would read 1.8 s and 0.2 s intervals."""
    now = [0.0]
    local_read = threading.Event()
    stamped = threading.Event()
    sampler_thread = threading.get_ident()

    def clock() -> float:
        if local_read.is_set() and threading.get_ident() == sampler_thread:
            stamped.set()  # the first look at the clock after the local reads is the stamp
        return now[0]

    class Gpu:
        name = "nvml"

        def read(self) -> Reading:
            now[0] += 0.001
            local_read.set()
            return Reading()

        def close(self) -> None:
            pass

    class SlowPage(CountingSource):
        def read(self) -> Reading:
            assert stamped.wait(10)
            now[0] += 0.5  # the page answered half a second later
            return super().read()

    s = Sampler([Gpu(), SlowPage()], interval=1.0, clock=clock, max_wait_s=5.0,
                inline=("nvml",))  # fmt: skip
    snap = s.tick()
    assert snap.engines  # the page answered within the wait, in this tick
    assert snap.t == pytest.approx(0.001)
    assert snap.duration_s == pytest.approx(0.501)  # what the reads took, as before
    s.close()
