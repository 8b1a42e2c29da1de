"""The sliding window kept up to date as snapshots enter and leave it.

``compute_window`` re-aggregates every snapshot of the window, so a tick's cost grew
with the window (100 ms ticks over 10 s: a hundred histograms re-differenced each
tick). ``LiveWindow`` holds running sums, monotonic deques for the extremes and
each histogram's readings with a count of the restarts among them (without one, the
window's delta is its newest reading less its oldest), kept as snapshots enter and
leave, and gives the same ``WindowStats`` that ``compute_window`` gives over
the same snapshots (tests/core/test_window_live.py replays readings through both).

Means and float sums are summed from their values when asked (once a step), in the
order the full recomputation sums them: a running float total that is added to and taken
from drifts by a few ulps, enough to turn 0.285 into 0.28500000000000003 and a "28%" in a
verdict into "29%". What costs per reading stays incremental: extremes, series, the
pairing of counter readings and whether a histogram restarted.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from functools import reduce
from operator import add
from typing import Any, TypeVar

from monitor.sources import samples
from monitor.window.stats import (
    ENGINE_COUNTERS,
    ENGINE_MEANS,
    GPU_MEANS,
    EngineKey,
    GpuKey,
    Reach,
    WindowStats,
    bucket_bounds,
    empty_stats,
    engine_key,
    engine_reach,
    gpu_key,
    gpu_reach,
    histogram_delta,
    host_reach,
    run_delta,
    window_stats,
)


class _Sum:
    """The present values in order (None skipped), summed when asked as ``sum()`` sums
    the same list: the same float, bit for bit, as the full recomputation."""

    __slots__ = ("seqs", "values")

    def __init__(self) -> None:
        self.seqs: deque[int] = deque()
        self.values: deque[float] = deque()

    def add(self, seq: int, v: float | None) -> None:
        if v is not None:
            self.seqs.append(seq)
            self.values.append(v)

    def evict(self, seq: int) -> None:
        if self.seqs and self.seqs[0] == seq:
            self.seqs.popleft()
            self.values.popleft()

    @property
    def n(self) -> int:
        return len(self.values)

    def total(self) -> float:
        return sum(self.values)

    def mean(self) -> float | None:
        return sum(self.values) / len(self.values) if self.values else None


class _LoopSum(_Sum):
    """Summed left to right as ``total += v`` (counter_increase and histogram_delta's
    loops), not as ``sum()``, which compensates its rounding from Python 3.12."""

    __slots__ = ()

    def total(self) -> float:
        return reduce(add, self.values, 0.0)


class _Extreme:
    """Sliding max (or min) of present values: a monotonic deque of (seq, value)."""

    __slots__ = ("items", "better")

    def __init__(self, better: Callable[[float, float], bool]) -> None:
        self.items: deque[tuple[int, float]] = deque()
        self.better = better  # better(new, old): old can never be the extreme again

    def add(self, seq: int, v: float | None) -> None:
        if v is None:
            return
        items = self.items
        while items and not self.better(items[-1][1], v):
            items.pop()
        items.append((seq, v))

    def evict(self, seq: int) -> None:
        if self.items and self.items[0][0] == seq:
            self.items.popleft()

    def value(self) -> float | None:
        return self.items[0][1] if self.items else None


def _gt(a: float, b: float) -> bool:
    return a > b


def _lt(a: float, b: float) -> bool:
    return a < b


class _Series:
    """The present values in order, with their seqs (for series, first and last)."""

    __slots__ = ("items",)

    def __init__(self) -> None:
        self.items: deque[tuple[int, float]] = deque()

    def add(self, seq: int, v: float | None) -> None:
        if v is not None:
            self.items.append((seq, v))

    def evict(self, seq: int) -> None:
        if self.items and self.items[0][0] == seq:
            self.items.popleft()


class _CounterIncrease:
    """``counter_increase`` over the window: the increase between consecutive present
    readings (a decrease is a restart: the new value counts), summed."""

    __slots__ = ("items", "inc")

    def __init__(self) -> None:
        # (seq, value, increase from the previous present reading; 0 for the first)
        self.items: deque[tuple[int, float, float]] = deque()
        self.inc = _LoopSum()

    def add(self, seq: int, v: float | None) -> None:
        if v is None:
            return
        if self.items:
            prev = self.items[-1][1]
            d = v - prev if v >= prev else v
            self.inc.add(seq, d)
        else:
            d = 0.0
        self.items.append((seq, v, d))

    def evict(self, seq: int) -> None:
        items = self.items
        if not items or items[0][0] != seq:
            return
        items.popleft()
        if items:
            s, v, d = items[0]
            self.inc.evict(s)  # the new first reading has no baseline in the window
            items[0] = (s, v, 0.0)

    def value(self) -> float | None:
        if len(self.items) < 2:
            return None
        return self.inc.total()


class _HistogramDelta:
    """``histogram_delta`` over the window. A run of readings without a restart adds its
    last less its first, so while the window holds none (a count that fell, buckets that
    changed), the delta is the newest reading less the oldest: each reading costs a
    comparison when it enters, and the buckets are subtracted only when asked. With a
    restart in the window (rare), the delta is made from the readings as histogram_delta
    makes it."""

    __slots__ = ("items", "breaks")

    def __init__(self) -> None:
        # (seq, bounds, histogram, whether it breaks the run: a restart or other buckets)
        self.items: deque[tuple[int, tuple[float, ...], samples.Histogram, bool]] = deque()
        self.breaks = 0  # readings in the window, but the oldest, that break the run

    def add(self, seq: int, h: samples.Histogram | None) -> None:
        if h is None:
            return
        bounds = bucket_bounds(h)
        broken = False
        if self.items:
            _, pbounds, prev, _ = self.items[-1]
            broken = pbounds != bounds or h.count < prev.count
            self.breaks += broken
        self.items.append((seq, bounds, h, broken))

    def evict(self, seq: int) -> None:
        items = self.items
        if not items or items[0][0] != seq:
            return
        items.popleft()
        if items and items[0][3]:
            # The oldest breaks nothing: with what came before it gone, the run starts there.
            s, bounds, h, _ = items[0]
            items[0] = (s, bounds, h, False)
            self.breaks -= 1

    def value(self) -> samples.Histogram | None:
        items = self.items
        if len(items) < 2:
            return None
        if self.breaks:
            return histogram_delta([h for _, _, h, _ in items])
        # One run, every reading with the same buckets: what histogram_delta makes of it.
        return run_delta(items[-1][1], items[0][2], items[-1][2])


class _Group:
    """The entries of one GPU, engine or the host in the window, and their aggregates."""

    def __init__(self) -> None:
        # (seq, t, sample, its place among its snapshot's samples)
        self.entries: deque[tuple[int, float, Any, int]] = deque()
        self.evictions = 0
        self.reset()

    def reset(self) -> None:  # the aggregates, empty
        raise NotImplementedError

    def accumulate(self, seq: int, t: float, sample: Any) -> None:
        raise NotImplementedError

    def drop(self, seq: int, sample: Any) -> None:
        raise NotImplementedError

    def add(self, seq: int, t: float, sample: Any, pos: int = 0) -> None:
        self.entries.append((seq, t, sample, pos))
        self.accumulate(seq, t, sample)

    def trim(self, base_seq: int, oldest_seq: int, base_t: float, reach: float) -> None:
        """Keep the readings from the baseline snapshot ``base_seq`` (at ``base_t``) on
        and, where this group has none there, its newest before it (its own baseline: a
        source read every few ticks is missing from most snapshots, the baseline snapshot
        among them) when read at most ``reach`` seconds before and not before snapshot
        ``oldest_seq``."""
        entries = self.entries
        while entries:
            seq, t = entries[0][0], entries[0][1]
            if seq >= base_seq:
                return
            nxt = next((e[0] for e in entries if e[0] != seq), None)
            near = reach > 0 and base_t - t <= reach
            if near and seq >= oldest_seq and (nxt is None or nxt > base_seq):
                return
            self.evict(seq)

    def evict(self, seq: int) -> None:
        while self.entries and self.entries[0][0] == seq:
            _, _, sample, _ = self.entries.popleft()
            self.drop(seq, sample)
            self.evictions += 1
        if self.evictions >= max(32, len(self.entries)):
            # Sum afresh: what was added and taken away has drifted by a few ulps.
            self.evictions = 0
            self.reset()
            for s, t, smp, _ in self.entries:
                self.accumulate(s, t, smp)


class _GpuGroup(_Group):
    def reset(self) -> None:
        self.means = {name: _Sum() for name in GPU_MEANS}
        self.util_max_ = _Extreme(_gt)
        self.reasons: Counter[str] = Counter()
        self.with_reasons = 0
        self.energy = _CounterIncrease()

    def accumulate(self, seq: int, t: float, g: samples.GpuSample) -> None:
        for name, acc in self.means.items():
            acc.add(seq, getattr(g, name))
        self.util_max_.add(seq, g.util)
        self.energy.add(seq, g.energy_joules)
        if g.throttle_reasons is not None:
            self.with_reasons += 1
            self.reasons.update(set(g.throttle_reasons))

    def drop(self, seq: int, g: samples.GpuSample) -> None:
        for acc in self.means.values():
            acc.evict(seq)
        self.util_max_.evict(seq)
        self.energy.evict(seq)
        if g.throttle_reasons is not None:
            self.with_reasons -= 1
            self.reasons.subtract(set(g.throttle_reasons))
            self.reasons += Counter()  # drop the reasons that no reading holds any more

    # GpuReadings, for monitor.window.stats.gpu_stats
    def last(self) -> samples.GpuSample:
        return self.entries[-1][2]

    def last_t(self) -> float:
        return self.entries[-1][1]

    def count(self) -> int:
        return len(self.entries)

    def mean(self, field: str) -> float | None:
        return self.means[field].mean()

    def util_max(self) -> float | None:
        return self.util_max_.value()

    def throttle_reasons(self) -> tuple[str, ...] | None:
        return tuple(sorted(self.reasons)) if self.with_reasons else None

    def processes(self) -> tuple[samples.GpuProcess, ...] | None:
        # Read every few seconds, not every tick: the latest list still in the window.
        return next(
            (e[2].processes for e in reversed(self.entries) if e[2].processes is not None), None
        )

    def energy_increase(self) -> float | None:
        return self.energy.value()


# The engine's gauges whose extremes its window gives: (field, most) -> better(new, old).
_ENGINE_EXTREMES: dict[tuple[str, bool], Callable[[float, float], bool]] = {
    ("running", True): _gt,
    ("running", False): _lt,
    ("waiting", True): _gt,
    ("kv_cache_usage", True): _gt,
}
_ENGINE_SERIES = ("running", "waiting")


class _EngineGroup(_Group):
    def reset(self) -> None:
        self.means = {name: _Sum() for name in ENGINE_MEANS}
        self.extremes = {key: _Extreme(better) for key, better in _ENGINE_EXTREMES.items()}
        self.series_ = {name: _Series() for name in _ENGINE_SERIES}
        self.counters = {name: _CounterIncrease() for name in ENGINE_COUNTERS}
        self.hists: dict[str, _HistogramDelta] = {}
        self.seq_cap_: tuple[int, float] | None = None

    def accumulate(self, seq: int, t: float, e: samples.EngineSample) -> None:
        for name, acc in self.means.items():
            acc.add(seq, getattr(e, name))
        for (name, _), ext in self.extremes.items():
            ext.add(seq, getattr(e, name))
        for name, ser in self.series_.items():
            ser.add(seq, getattr(e, name))
        for name, ctr in self.counters.items():
            ctr.add(seq, getattr(e, name))
        for name, h in e.histograms:
            delta = self.hists.get(name)
            if delta is None:
                delta = self.hists[name] = _HistogramDelta()
            delta.add(seq, h)
        if e.seq_cap_reported:
            self.seq_cap_ = (seq, e.seq_cap_reported)

    def drop(self, seq: int, e: samples.EngineSample) -> None:
        for acc in self.means.values():
            acc.evict(seq)
        for ext in self.extremes.values():
            ext.evict(seq)
        for ser in self.series_.values():
            ser.evict(seq)
        for ctr in self.counters.values():
            ctr.evict(seq)
        for name, _ in e.histograms:
            delta = self.hists.get(name)
            if delta is not None:
                delta.evict(seq)
                if not delta.items:
                    del self.hists[name]
        if self.seq_cap_ is not None and self.seq_cap_[0] == seq:
            self.seq_cap_ = None  # the newest reported cap has left: none is left after it

    # EngineReadings, for monitor.window.stats.engine_stats
    def last(self) -> samples.EngineSample:
        return self.entries[-1][2]

    def count(self) -> int:
        return len(self.entries)

    def elapsed(self) -> float:
        entries = self.entries
        return entries[-1][1] - entries[0][1] if len(entries) >= 2 else 0.0

    def mean(self, field: str) -> float | None:
        return self.means[field].mean()

    def extreme(self, field: str, most: bool) -> float | None:
        return self.extremes[field, most].value()

    def series(self, field: str) -> tuple[float, ...]:
        return tuple(v for _, v in self.series_[field].items)

    def increase(self, counter: str) -> float | None:
        return self.counters[counter].value()

    def deltas(self) -> Mapping[str, samples.Histogram]:
        out: dict[str, samples.Histogram] = {}
        for name, _ in self.last().histograms:
            acc = self.hists.get(name)
            h = acc.value() if acc is not None else None
            if h is not None:
                out[name] = h
        return out

    def seq_cap(self) -> float | None:
        return self.seq_cap_[1] if self.seq_cap_ is not None else None


class _HostGroup(_Group):
    def reset(self) -> None:
        self.freq = _Sum()

    def accumulate(self, seq: int, t: float, h: samples.HostSample) -> None:
        self.freq.add(seq, h.cpu_freq_mhz)

    def drop(self, seq: int, h: samples.HostSample) -> None:
        self.freq.evict(seq)

    # HostReadings, for monitor.window.stats.host_stats: everything but the frequency's
    # mean comes from the first and last readings.
    def first(self) -> samples.HostSample:
        return self.entries[0][2]

    def last(self) -> samples.HostSample:
        return self.entries[-1][2]

    def elapsed(self) -> float:
        return self.entries[-1][1] - self.entries[0][1]

    def freq_mean(self) -> float | None:
        return self.freq.mean()


_G = TypeVar("_G", bound=_Group)


def _enter(groups: dict[Any, _G], key: Any, make: Callable[[], _G]) -> _G:
    """The group of ``key``, made on its first reading."""
    grp = groups.get(key)
    if grp is None:
        grp = groups[key] = make()
    return grp


def _trim_groups(
    groups: dict[Any, _G],
    base_seq: int,
    oldest_seq: int,
    base_t: float,
    reach: Callable[[Any], float],
) -> None:
    """Each group keeps its own baseline, within its source's reach; one left with no
    reading goes. A group with no reading since the baseline snapshot is out of the
    window, but kept while its last reading may still be a baseline: a paced source."""
    for key, grp in list(groups.items()):
        grp.trim(base_seq, oldest_seq, base_t, reach(key))
        if not grp.entries:
            del groups[key]


def _since(groups: dict[Any, _G], base_seq: int) -> dict[Any, _G]:
    """The groups in the window: those with a reading since the baseline snapshot."""
    return {k: g for k, g in groups.items() if g.entries[-1][0] >= base_seq}


class LiveWindow:
    """The window of the last ``seconds`` (plus one baseline snapshot before it, as
    ``Sampler.window`` takes it), updated one snapshot at a time."""

    def __init__(
        self, seconds: float, capacity: int | None = None, reach: Reach | None = None
    ) -> None:
        self.seconds = seconds
        self.capacity = capacity  # the sampler ring's: nothing older than it holds
        self.reach: Reach = reach or {}  # the paced sources' (Sampler.reach)
        self._snaps: deque[tuple[int, samples.Snapshot]] = deque()
        self._seq = 0
        self._gpus: dict[GpuKey, _GpuGroup] = {}
        self._engines: dict[EngineKey, _EngineGroup] = {}
        self._host = _HostGroup()
        self._load: dict[str, deque[tuple[int, float]]] = {}
        self._load_sums: dict[str, _Sum] = {}

    def clear(self) -> None:
        self._snaps.clear()
        self._gpus.clear()
        self._engines.clear()
        self._host = _HostGroup()
        self._load.clear()
        self._load_sums.clear()

    def rebuild(self, snapshots: Sequence[samples.Snapshot], seconds: float | None = None) -> None:
        """Start again from these snapshots (the window's length changed, or a restart)."""
        if seconds is not None:
            self.seconds = seconds
        self.clear()
        for snap in snapshots:
            self.push(snap)

    @property
    def latest(self) -> samples.Snapshot | None:
        return self._snaps[-1][1] if self._snaps else None

    def push(self, snap: samples.Snapshot) -> None:
        self._seq += 1
        seq = self._seq
        self._snaps.append((seq, snap))
        t = snap.t
        for g in snap.gpus:
            _enter(self._gpus, gpu_key(g), _GpuGroup).add(seq, t, g)
        for pos, e in enumerate(snap.engines):
            _enter(self._engines, engine_key(e), _EngineGroup).add(seq, t, e, pos)
        if snap.host is not None:
            self._host.add(seq, t, snap.host)
        for k, v in snap.load:
            self._load.setdefault(k, deque()).append((seq, v))
            acc = self._load_sums.get(k)
            if acc is None:
                acc = self._load_sums[k] = _Sum()
            acc.add(seq, v)
        self._trim()

    def _trim(self) -> None:
        snaps = self._snaps
        start = snaps[-1][1].t - self.seconds - 1e-9
        # Keep the newest snapshot before the start: counters need a baseline at the edge.
        while len(snaps) >= 2 and (
            snaps[1][1].t < start or (self.capacity is not None and len(snaps) > self.capacity)
        ):
            self._evict()
        # A GPU, engine or the host read every few ticks keeps its own newest reading at
        # or before the baseline snapshot, within its source's reach and the sampler's
        # ring: an engine page read once a second at 200 ms ticks is in one snapshot of
        # five, and a window holding one of its readings has no rate (its series would come
        # and go between scrapes). One read every tick keeps the baseline snapshot's.
        base_seq, base = snaps[0]
        oldest = 0 if self.capacity is None else self._seq - self.capacity + 1
        reach = self.reach
        _trim_groups(self._gpus, base_seq, oldest, base.t, lambda k: gpu_reach(reach, k))
        _trim_groups(self._engines, base_seq, oldest, base.t, lambda _: engine_reach(reach))
        self._host.trim(base_seq, oldest, base.t, host_reach(reach))

    def _evict(self) -> None:
        seq, snap = self._snaps.popleft()
        for k, _ in snap.load:
            items = self._load[k]
            if items and items[0][0] == seq:
                items.popleft()
                self._load_sums[k].evict(seq)
            if not items:
                del self._load[k]
                del self._load_sums[k]

    def stats(self) -> WindowStats:
        if not self._snaps:
            return empty_stats()
        base = self._snaps[0][0]
        # Engines in the order each first appears in the window, as compute_window has them.
        engines = sorted(
            _since(self._engines, base).values(), key=lambda g: (g.entries[0][0], g.entries[0][3])
        )
        host = self._host.entries
        return window_stats(
            self._snaps[0][1],
            self._snaps[-1][1],
            len(self._snaps),
            _since(self._gpus, base),
            engines,
            self._host if host and host[-1][0] >= base else None,
            (
                (k, self._load_sums[k].total() / self._load_sums[k].n)
                for k in sorted(self._load, key=lambda k: self._load[k][0][0])
            ),
        )
