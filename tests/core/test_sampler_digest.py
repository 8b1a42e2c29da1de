"""The agent's sampler reads every source on time and makes snapshots a few ticks at a time
(``digest_every_s``): what every listener and reader gets is what ticking one by one gives."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from monitor.read.sampler import Sampler
from monitor.sources.base import Reading
from monitor.sources.samples import EngineSample, GpuSample, Snapshot, SourceError
from monitor.watch.pipeline import Monitor


class Box:
    """What the sources read: its numbers move between ticks (the virtual clock's)."""

    def __init__(self) -> None:
        self.now = 0.0
        self.wall = 1_700_000_000.0


class PageSource:
    """An engine page: fetched on the tick (read_later), made into samples when asked."""

    name = "vllm"

    def __init__(self, box: Box) -> None:
        self.box = box
        self.fetched = 0
        self.made = 0

    def _sample(self, page: int) -> Reading:
        self.made += 1
        if page % 4 == 3:
            return Reading(errors=(SourceError("vllm", "u", f"page {page} garbled"),))
        running = float(page % 5)
        return Reading(
            engines=(EngineSample(url="u", model_name="m", engine="0", running=running),)
        )

    def read(self) -> Reading:
        self.fetched += 1
        self.box.now += 0.003
        return self._sample(self.fetched)

    def read_later(self) -> Callable[[], Reading]:
        self.fetched += 1
        self.box.now += 0.003
        page = self.fetched  # what the page said now, whenever it is made
        return lambda: self._sample(page)

    def close(self) -> None:
        pass


class GpuSource:
    name = "nvml"

    def __init__(self, box: Box) -> None:
        self.box = box
        self.n = 0

    def read(self) -> Reading:
        self.n += 1
        return Reading(
            gpus=(GpuSample(index=0, uuid="GPU-0", name="H200", source="nvml", util=self.n / 100),)
        )

    def close(self) -> None:
        pass


class Ticks:
    """Runs a sampler's run() for ``n`` ticks on the box's virtual clock."""

    def __init__(self, sampler: Sampler, box: Box, n: int, between: Callable[[int], None]) -> None:
        self.sampler, self.box, self.n, self.between = sampler, box, n, between
        self.waits = 0

    def is_set(self) -> bool:
        return self.waits >= self.n

    def wait(self, timeout: float) -> bool:
        self.waits += 1
        self.between(self.waits)
        self.box.now += timeout
        self.box.wall += timeout
        return False

    def clear(self) -> None:
        pass


def run_ticks(
    digest_every_s: float, n: int, between: Callable[[Sampler, int], None] | None = None
) -> tuple[Sampler, PageSource, list[Snapshot]]:
    box = Box()
    page = PageSource(box)
    sampler = Sampler(
        [GpuSource(box), page],
        interval=1.0,
        clock=lambda: box.now,
        wall=lambda: box.wall,
        max_wait_s=0.8,
        inline=("nvml", "vllm"),
        digest_every_s=digest_every_s,
    )
    heard: list[Snapshot] = []
    sampler.subscribe(heard.append)
    sampler._stop = Ticks(  # type: ignore[assignment]
        sampler, box, n, (lambda i: between(sampler, i)) if between else (lambda i: None)
    )
    sampler.run()
    return sampler, page, heard


def test_snapshots_made_a_few_ticks_at_a_time_are_those_ticking_one_by_one_gives() -> None:
    one_by_one, _, heard_each = run_ticks(0.0, 17)
    later, page, heard_later = run_ticks(5.0, 17)
    later.flush()
    assert len(heard_each) == 17
    # Same times, same readings, same errors, same order, to every listener and in the ring.
    assert heard_later == heard_each
    assert later.snapshots() == one_by_one.snapshots()
    assert [s.errors for s in heard_later if s.errors][0][0].message == "page 3 garbled"
    assert page.made == page.fetched == 17


def test_the_pages_are_made_every_few_seconds_not_every_tick() -> None:
    made_after: list[tuple[int, int]] = []

    def between(sampler: Sampler, i: int) -> None:
        page = sampler.sources[1]
        made_after.append((i, page.made))  # type: ignore[attr-defined]

    _, page, heard = run_ticks(5.0, 12, between)
    # Ticks at ~0, 1, ... 11 s: the pages wait until five seconds have gathered.
    assert made_after[:5] == [(1, 0), (2, 0), (3, 0), (4, 0), (5, 0)]
    assert made_after[5] == (6, 6)
    assert made_after[10] == (11, 6)
    assert made_after[11] == (12, 12)
    assert page.fetched == 12


def test_a_reader_sees_every_tick_read_before_it() -> None:
    seen: list[tuple[int, float | None, int]] = []

    def between(sampler: Sampler, i: int) -> None:
        latest = sampler.latest()
        assert latest is not None
        seen.append((i, latest.gpus[0].util, len(sampler.snapshots())))

    run_ticks(5.0, 4, between)
    assert seen == [(1, 0.01, 1), (2, 0.02, 2), (3, 0.03, 3), (4, 0.04, 4)]


def test_the_monitors_readers_see_the_last_tick_read() -> None:
    def between(sampler: Sampler, i: int) -> None:
        if i == 3:
            window = monitor.window()
            assert window is not None and window.samples == 3
            report = monitor.report()
            assert report is not None

    box = Box()
    sampler = Sampler([GpuSource(box), PageSource(box)], interval=1.0, clock=lambda: box.now,
                      wall=lambda: box.wall, digest_every_s=5.0)  # fmt: skip
    monitor = Monitor(sampler, window_s=10.0)
    sampler._stop = Ticks(sampler, box, 3, lambda i: between(sampler, i))  # type: ignore[assignment]
    sampler.run()
    diagnosis = monitor.diagnosis()
    assert diagnosis is not None


def test_a_listener_that_reads_the_sampler_keeps_the_order() -> None:
    order: list[tuple[float, float]] = []

    def between(sampler: Sampler, i: int) -> None:
        if i == 1:
            # Each listener call sees its own snapshot as the ring's last: a read inside a
            # listener does not make the next ticks' snapshots ahead of their turn.
            sampler.subscribe(lambda snap: order.append((snap.t, sampler.snapshots()[-1].t)))

    sampler, _, _ = run_ticks(5.0, 9, between)
    sampler.flush()
    assert len(order) == 9  # the first tick too: it was not made before the listener came
    assert all(mine == last for mine, last in order)
    assert [t for t, _ in order] == sorted(t for t, _ in order)


def test_a_reader_in_another_thread_waits_for_the_digest_under_way() -> None:
    box = Box()
    sampler = Sampler([PageSource(box)], interval=1.0, clock=lambda: box.now, digest_every_s=5.0)
    release = threading.Event()
    entered = threading.Event()

    def slow_listener(snap: Snapshot) -> None:
        entered.set()
        release.wait(10)

    for _ in range(3):
        sampler._tick_later()
        box.now += 1.0
    sampler.subscribe(slow_listener)
    digest = threading.Thread(target=sampler.flush)
    digest.start()
    assert entered.wait(10)
    got: list[Snapshot | None] = []
    reader = threading.Thread(target=lambda: got.append(sampler.latest()))
    reader.start()
    time.sleep(0.2)
    assert got == []  # it waits: half the ticks made would be a stale answer
    release.set()
    reader.join(10)
    digest.join(10)
    assert len(got) == 1 and got[0] is not None
    assert got[0].t == sampler.snapshots()[-1].t and len(sampler.snapshots()) == 3


def test_a_made_reading_that_raises_costs_that_reading_only() -> None:
    class Exploding(PageSource):
        def read_later(self) -> Callable[[], Reading]:
            self.fetched += 1

            def made() -> Reading:
                raise RuntimeError("parser bug")

            return made

    box = Box()
    sampler = Sampler([GpuSource(box), Exploding(box)], interval=1.0, clock=lambda: box.now,
                      max_wait_s=0.8, inline=("nvml", "vllm"), digest_every_s=5.0)  # fmt: skip
    sampler._tick_later()
    box.now += 1
    sampler._tick_later()
    snaps = sampler.snapshots()
    assert len(snaps) == 2
    assert all(s.gpus for s in snaps)
    assert all("parser bug" in s.errors[0].message for s in snaps)


def test_stop_makes_what_was_read() -> None:
    box = Box()
    page = PageSource(box)
    heard: list[Snapshot] = []
    sampler = Sampler([page], interval=0.01, digest_every_s=60.0)
    sampler.subscribe(heard.append)
    sampler.start()
    deadline = time.monotonic() + 10
    while page.fetched < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    sampler.stop()
    assert page.fetched >= 3
    assert len(heard) == page.fetched == page.made


def test_a_reader_that_makes_every_tick_while_one_is_read_does_not_stop_the_ticks() -> None:
    # Requests make waiting ticks from their own threads, at any moment: one that makes
    # the tick just added, before the sampler looks at it, must not break the sampler.
    box = Box()
    page = PageSource(box)
    sampler = Sampler([page], interval=1.0, clock=lambda: box.now, digest_every_s=5.0)
    real = sampler._waiting

    class Raced(type(real)):  # type: ignore[misc]
        def append(self, item: object) -> None:
            super().append(item)
            sampler.flush()  # as a request's thread would, between the append and the look

    sampler._waiting = Raced()  # type: ignore[assignment]
    for _ in range(7):
        sampler._tick_later()
        box.now += 1.0
    assert len(sampler.snapshots()) == 7 == page.made


@pytest.mark.parametrize(("step_s", "steps_taken"), [(5.0, 6), (1.0, 30)])
def test_a_step_due_in_a_digest_judges_its_newest_reading_which_a_reader_then_reads(
    step_s: float, steps_taken: int
) -> None:
    # The agent's pace: ticks every second, made five at a time or when read, verdicts
    # stepped every 5 s. A scraper reading every 5 s reads the step itself: no look of
    # its own between steps. Steps of a second are still each taken within a digest.
    from monitor.diagnosis import Diagnoser

    class Counting(Diagnoser):
        def __init__(self) -> None:
            super().__init__()
            self.peeks = 0

        def peek(self, window):  # type: ignore[no-untyped-def]
            self.peeks += 1
            return super().peek(window)

    box = Box()
    sampler = Sampler([GpuSource(box), PageSource(box)], interval=1.0, clock=lambda: box.now,
                      wall=lambda: box.wall, digest_every_s=5.0)  # fmt: skip
    diagnoser = Counting()
    monitor = Monitor(sampler, diagnoser, window_s=10.0, diagnose_every_s=step_s)
    steps: list[float] = []
    monitor.listeners.append(lambda d, w: steps.append(w.end))
    reads: list[tuple[float, float]] = []

    def between(i: int) -> None:
        if i % 5 == 0:
            report = monitor.report()
            newest = sampler.snapshots()[-1]
            assert report is not None
            reads.append((report["time"], newest.wall))

    sampler._stop = Ticks(sampler, box, 30, between)  # type: ignore[assignment]
    sampler.run()
    assert [t for t, _ in reads] == [newest for _, newest in reads]  # the newest reading
    assert diagnoser.peeks == 0  # each read found the step on it
    assert len(steps) == steps_taken
    assert all(b - a >= 0.95 * step_s for a, b in zip(steps, steps[1:]))
