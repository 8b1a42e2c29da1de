"""Ticks every source on monotonic deadlines into a bounded ring of immutable snapshots.

The exporter, the diagnosis and the TUI only read the ring; nothing but the
sampler calls NVML or HTTP.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass

from monitor.sources.base import Reading, Source
from monitor.sources.paced import Paced
from monitor.sources.samples import EngineSample, GpuSample, HostSample, Snapshot, SourceError
from monitor.window.full import compute_window
from monitor.window.stats import Reach, WindowStats

log = logging.getLogger(__name__)

Listener = Callable[[Snapshot], None]
# What a source gives a tick: its reading, or (read_later) the rest of it, made later.
Part = Reading | Callable[[], Reading]


def _failed(name: str, exc: Exception) -> Reading:
    log.warning("source %s failed: %s", name, exc)
    return Reading(errors=(SourceError(name, "", f"{type(exc).__name__}: {exc}"),))


@dataclass(frozen=True, slots=True)
class _Waiting:
    """A tick whose readings are not all made yet (see Sampler's digest_every_s)."""

    t: float
    wall: float
    duration_s: float
    parts: tuple[tuple[str, Part], ...]
    load: tuple[tuple[str, float], ...]


class Sampler:
    def __init__(
        self,
        sources: Sequence[Source],
        interval: float = 1.0,
        capacity: int = 3600,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        max_wait_s: float | None = None,
        inline: Collection[str] = (),
        digest_every_s: float = 0.0,
    ) -> None:
        if interval <= 0:
            raise ValueError("interval must be positive")
        self.sources = list(sources)
        self.interval = interval
        self._clock = clock
        self._wall = wall
        self._ring: deque[Snapshot] = deque(maxlen=capacity)
        self._lock = threading.Lock()
        self._listeners: list[Listener] = []
        # Told when the snapshots being made are all made: after a push of one, or after a
        # digest's last (a Monitor takes a step due meanwhile on the newest of them).
        self._caught_up: list[Callable[[], None]] = []
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        # HTTP sources block on the network: read them side by side so one slow
        # endpoint does not delay the others' readings.
        self._pool = ThreadPoolExecutor(
            max_workers=max(1, len(self.sources)), thread_name_prefix="headroom-source"
        )
        self.load_provider: Callable[[], tuple[tuple[str, float], ...]] | None = None
        # With a limit, a tick waits at most this long for its sources: one still reading
        # (a page answering in 3 s) joins a later tick with what it read, and is not asked
        # again meanwhile, so the others keep their pace. None: wait for every source.
        self.max_wait_s = max_wait_s
        self._pending: dict[int, Future[Reading]] = {}
        self._pending_since: dict[int, float] = {}  # clock when each pending read began
        # Sources (by name) read in the sampler's own thread under max_wait_s: local reads
        # (NVML, /proc) that take well under a millisecond, where handing each to a worker
        # thread and back would cost more than the read. One that hangs stalls the ticks,
        # as a stuck driver should be seen to.
        self.inline = frozenset(inline)
        # How late the last tick started against its deadline (seconds; run() only).
        self.lateness_s = 0.0
        # With digest_every_s > 0, run() reads each source on time but makes what a source
        # can make later (an engine page's parse: read_later) together with the snapshots
        # and the listeners' work (window, diagnosis) once that many seconds have gathered,
        # or at once when a reader asks (latest(), snapshots(), flush()). A tick's work
        # done once a second runs from memory the second's sleep let go from the caches:
        # the same work done a few ticks at a time costs less (bench/wake_cost.py: several
        # times less on this project's CPU machines, a little on the H200's host). The
        # snapshots, their times and every listener's calls are those ticking gives.
        self.digest_every_s = digest_every_s
        self._waiting: deque[_Waiting] = deque()
        self._digest_lock = threading.RLock()
        # The thread digesting, 0 when none (pushes from other threads are their own batch).
        self._digest_owner = 0

    @property
    def capacity(self) -> int | None:
        return self._ring.maxlen

    @property
    def reach(self) -> Reach:
        """How far before a window's baseline snapshot each paced source's own baseline
        may be (seconds, by source name; monitor.window.stats.Reach): one of its reads and
        a tick. Its reads fall due ``every_s`` apart, less its slack, each made on the first
        tick after: a source missing from the baseline snapshot read last within that, or a
        tick more where a slow read joined a later tick. Never further: not back across a
        stall, where the baseline snapshot is the last before it for every source alike."""
        return {s.name: s.every_s + self.interval for s in self.sources if isinstance(s, Paced)}

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def on_caught_up(self, hook: Callable[[], None]) -> None:
        """Call ``hook`` once the snapshots being made are made: after each push, and after
        the last snapshot of a digest (in the thread that made them)."""
        self._caught_up.append(hook)

    def _tell_caught_up(self) -> None:
        for hook in self._caught_up:
            try:
                hook()
            except Exception:
                log.exception("caught-up hook failed")

    def _read_one(self, source: Source) -> Reading:
        try:
            return source.read()
        except Exception as exc:  # a source must not raise, but a bug must not kill sampling
            return _failed(source.name, exc)

    def _read_later(self, source: Source) -> Part:
        later = getattr(source, "read_later", None)
        if later is None:
            return self._read_one(source)
        try:
            made: Callable[[], Reading] = later()
            return made
        except Exception as exc:
            return _failed(source.name, exc)

    @staticmethod
    def _made(name: str, part: Part) -> Reading:
        if isinstance(part, Reading):
            return part
        try:
            return part()
        except Exception as exc:  # as _read_one: a bug costs one reading, not the sampler
            return _failed(name, exc)

    def _read_parts(self, later: bool) -> tuple[list[tuple[str, Part]], float | None]:
        """Each source's part, and when the tick's own sources had been read (None: when
        every read has returned, which is now)."""
        read = self._read_later if later else self._read_one
        if len(self.sources) == 1 and self.max_wait_s is None:
            parts: list[Part] = [read(self.sources[0])]
            names = [self.sources[0].name]
        elif self.max_wait_s is None:
            parts = list(self._pool.map(read, self.sources))
            names = [s.name for s in self.sources]
        else:
            return self._read_within(self.max_wait_s, read)
        return list(zip(names, parts)), None

    def _stamp(self, t0: float, read_at: float | None) -> tuple[float, float, float]:
        """The tick's time (monotonic and wall) and how long its reads took."""
        t1 = self._clock()
        wall = self._wall()
        # Waiting within max_wait_s on a slow page must not date the GPUs' and the host's
        # readings up to 0.8 of an interval late: their rates would swing tick to tick.
        t = t1 if read_at is None else read_at
        return t, wall - (t1 - t), t1 - t0

    def tick(self) -> Snapshot:
        """Read every source once and append the snapshot to the ring (made at once,
        whatever digest_every_s says)."""
        self.flush()
        t0 = self._clock()
        parts, read_at = self._read_parts(later=False)
        readings = [self._made(name, part) for name, part in parts]
        load = self.load_provider() if self.load_provider is not None else ()
        snap = self._snapshot(*self._stamp(t0, read_at), readings, load)
        self.push(snap)
        return snap

    def _tick_later(self) -> None:
        """Read every source once; the snapshot is made with the next digest."""
        t0 = self._clock()
        parts, read_at = self._read_parts(later=True)
        load = self.load_provider() if self.load_provider is not None else ()
        t, wall, took = self._stamp(t0, read_at)
        self._waiting.append(_Waiting(t, wall, took, tuple(parts), load))
        try:
            first = self._waiting[0].t
        except IndexError:
            return  # a reader in another thread made them all meanwhile
        # Ticks jitter: a digest falls due a little early rather than a whole tick late.
        if t - first >= 0.95 * self.digest_every_s:
            self.flush()

    def flush(self) -> None:
        """Make the snapshots of the ticks read but not yet made, in order, and tell the
        listeners (in the calling thread). Re-entered from a listener: returns at once."""
        with self._digest_lock:
            if self._digest_owner:
                return
            self._digest_owner = threading.get_ident()
            try:
                made = False
                while self._waiting:
                    w = self._waiting.popleft()
                    readings = [self._made(name, part) for name, part in w.parts]
                    self.push(self._snapshot(w.t, w.wall, w.duration_s, readings, w.load))
                    made = True
                if made:
                    self._tell_caught_up()
            finally:
                self._digest_owner = 0

    def _snapshot(
        self,
        t: float,
        wall: float,
        duration_s: float,
        readings: Sequence[Reading],
        load: tuple[tuple[str, float], ...],
    ) -> Snapshot:
        gpus: list[GpuSample] = []
        engines: list[EngineSample] = []
        errors: list[SourceError] = []
        host: HostSample | None = None
        for r in readings:
            gpus.extend(r.gpus)
            engines.extend(r.engines)
            errors.extend(r.errors)
            if r.host is not None:
                host = r.host
        return Snapshot(
            t=t,
            wall=wall,
            gpus=tuple(gpus),
            engines=tuple(engines),
            host=host,
            errors=tuple(errors),
            duration_s=duration_s,
            load=load,
        )

    def _read_within(
        self, limit: float, read: Callable[[Source], Part]
    ) -> tuple[list[tuple[str, Part]], float]:
        futures: list[tuple[int, Future[Part]]] = []
        fresh: list[Future[Part]] = []  # asked this tick: waited for, within the limit
        local: list[int] = []
        # A read that outlasted its tick and has ended since (a slow page, a timeout): what
        # it got, should this tick's own ask not answer in time.
        ended: dict[int, Future[Part]] = {}
        now = self._clock()
        for i, source in enumerate(self.sources):
            fut = self._pending.pop(i, None)
            due = getattr(source, "due", None)
            if fut is not None and fut.done() and (due is None or due()):
                # Ask again now rather than a tick later: after a fault the source's first
                # reading is this tick's, and a slow page is read as often as it answers;
                # still one request in flight at a time.
                ended[i] = fut
                fut = None
            if fut is None:
                if source.name in self.inline or (due is not None and not due()):
                    local.append(i)  # a paced source between reads answers at once
                    continue
                fut = self._pool.submit(read, source)
                self._pending_since[i] = now
                fresh.append(fut)
            futures.append((i, fut))
        got: dict[int, Part] = {i: read(self.sources[i]) for i in local}
        read_at = self._clock()  # the tick's time: its own sources read, the others asked
        if fresh:
            # A read still pending from an earlier tick is not waited for again: it would
            # hold every tick it spans, and the snapshots' times would wander.
            wait(fresh, timeout=max(0.0, limit - (self._clock() - now)))
        for i, fut in futures:
            if fut.done():
                got[i] = fut.result()
                self._pending_since.pop(i, None)
            else:
                self._pending[i] = fut
                if i in ended:
                    got[i] = ended[i].result()
        # In the sources' order, as map gives them.
        return [(self.sources[i].name, got[i]) for i in sorted(got)], read_at

    def stuck(self) -> list[tuple[Source, float]]:
        """The sources whose read has not returned, and for how long (seconds)."""
        now = self._clock()
        pending = dict(self._pending_since)
        return [
            (self.sources[i], now - t)
            for i, t in pending.items()
            if (fut := self._pending.get(i)) is not None and not fut.done()
        ]

    def push(self, snap: Snapshot) -> None:
        """Append a snapshot (from a tick, or from a replay) and tell the listeners."""
        with self._lock:
            self._ring.append(snap)
        for listener in self._listeners:
            try:
                listener(snap)
            except Exception:
                log.exception("snapshot listener failed")
        if self._digest_owner != threading.get_ident():
            self._tell_caught_up()

    def snapshots(self) -> tuple[Snapshot, ...]:
        self.flush()
        with self._lock:
            return tuple(self._ring)

    def latest(self) -> Snapshot | None:
        self.flush()
        with self._lock:
            return self._ring[-1] if self._ring else None

    def window(
        self, seconds: float | None = None, end: float | None = None, since: float | None = None
    ) -> WindowStats:
        """The last ``seconds`` up to ``end``; nothing read before ``since`` (a restart of
        what is watched: its old readings would mix two boxes in one window)."""
        snaps = self.snapshots()
        if since is not None:
            snaps = tuple(s for s in snaps if s.t >= since)
        if not snaps:
            return compute_window(())
        stop = end if end is not None else snaps[-1].t
        # One tick's reading covers the interval before it; include one snapshot
        # before the start so counters have a baseline at the window's edge.
        start = None if seconds is None else stop - seconds - 1e-9
        if start is not None:
            earlier = [s for s in snaps if s.t < start]
            if earlier:
                start = earlier[-1].t
        # A source read every few ticks reaches further back for its own baseline.
        return compute_window(snaps, start, stop, self.reach)

    def run(self, duration: float | None = None) -> None:
        """Tick on monotonic deadlines until stopped (or for ``duration`` seconds).

        A tick that overruns skips the deadlines it missed instead of bursting to
        catch up, so a stalled machine does not produce a volley of tiny windows.
        """
        start = self._clock()
        deadline = start
        while not self._stop.is_set():
            self.lateness_s = max(0.0, self._clock() - deadline)
            if self.digest_every_s > 0:
                self._tick_later()
            else:
                self.tick()
            deadline += self.interval
            now = self._clock()
            if duration is not None and now - start >= duration - 1e-6:
                break
            if now > deadline:
                missed = int((now - deadline) / self.interval) + 1
                deadline += missed * self.interval
            if duration is not None:
                deadline = min(deadline, start + duration)
            self._stop.wait(max(0.0, deadline - self._clock()))

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self.run, name="headroom-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        self.flush()  # what was read is kept

    def close(self) -> None:
        self.stop()
        self._pool.shutdown(wait=False, cancel_futures=True)
        for s in self.sources:
            try:
                s.close()
            except Exception:
                log.exception("closing source %s", s.name)
