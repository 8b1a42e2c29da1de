"""A window recomputed from its snapshots: ``compute_window`` over a list.

What each GPU, engine and the host hold in the window is read off the lists of their
samples (``_GpuList``, ``_EngineList``, ``_HostList``) and handed to the builders of
``monitor.window.stats``, the same ones the live window (``monitor.window.live``) hands
its running sums to.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Generic, TypeVar

from monitor.sources.samples import (
    EngineSample,
    GpuProcess,
    GpuSample,
    Histogram,
    HostSample,
    Snapshot,
)
from monitor.window.stats import (
    EngineKey,
    GpuKey,
    Reach,
    WindowStats,
    counter_increase,
    empty_stats,
    engine_key,
    engine_reach,
    gpu_key,
    gpu_reach,
    histogram_delta,
    host_reach,
    mean_present,
    window_stats,
)

S = TypeVar("S")


def _max(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None


def _min(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return min(present) if present else None


class _Timed(Generic[S]):
    """One GPU's, engine's or the host's samples in the window and their times, oldest first."""

    def __init__(self, samples: Sequence[S], times: Sequence[float]) -> None:
        self.samples = samples
        self.times = times

    def first(self) -> S:
        return self.samples[0]

    def last(self) -> S:
        return self.samples[-1]

    def last_t(self) -> float:
        return self.times[-1]

    def count(self) -> int:
        return len(self.samples)

    def elapsed(self) -> float:
        return self.times[-1] - self.times[0] if len(self.times) >= 2 else 0.0

    def mean(self, field: str) -> float | None:
        return mean_present(getattr(s, field) for s in self.samples)


class _GpuList(_Timed[GpuSample]):
    """A GPU's readings (``GpuReadings``)."""

    def util_max(self) -> float | None:
        return _max(s.util for s in self.samples)

    def throttle_reasons(self) -> tuple[str, ...] | None:
        reasons: set[str] = set()
        any_reasons = False
        for s in self.samples:
            if s.throttle_reasons is not None:
                any_reasons = True
                reasons.update(s.throttle_reasons)
        return tuple(sorted(reasons)) if any_reasons else None

    def processes(self) -> tuple[GpuProcess, ...] | None:
        # Read every few seconds, not every tick: the latest list still in the window.
        return next((s.processes for s in reversed(self.samples) if s.processes is not None), None)

    def energy_increase(self) -> float | None:
        return counter_increase([s.energy_joules for s in self.samples])


class _EngineList(_Timed[EngineSample]):
    """An engine's readings (``EngineReadings``)."""

    def extreme(self, field: str, most: bool) -> float | None:
        return (_max if most else _min)(getattr(s, field) for s in self.samples)

    def series(self, field: str) -> tuple[float, ...]:
        return tuple(v for v in (getattr(s, field) for s in self.samples) if v is not None)

    def increase(self, counter: str) -> float | None:
        return counter_increase([getattr(s, counter) for s in self.samples])

    def deltas(self) -> Mapping[str, Histogram]:
        out: dict[str, Histogram] = {}
        for name, _ in self.samples[-1].histograms:
            h = histogram_delta([s.histogram(name) for s in self.samples])
            if h is not None:
                out[name] = h
        return out

    def seq_cap(self) -> float | None:
        return next(
            (s.seq_cap_reported for s in reversed(self.samples) if s.seq_cap_reported), None
        )


class _HostList(_Timed[HostSample]):
    """The host's readings (``HostReadings``)."""

    def freq_mean(self) -> float | None:
        return mean_present(s.cpu_freq_mhz for s in self.samples)


def _baselines(
    before: Sequence[Snapshot], first: Snapshot, snaps: Sequence[Snapshot], reach: Reach
) -> list[tuple[Snapshot, set[GpuKey], set[EngineKey], bool]]:
    """The snapshots of ``before`` holding some group's own baseline: the newest reading of
    each GPU, engine and the host seen in ``snaps`` but missing from its first snapshot,
    no further before that snapshot than its source's ``reach``."""
    gpus = {gpu_key(g) for s in snaps for g in s.gpus} - {gpu_key(g) for g in first.gpus}
    gpus = {k for k in gpus if gpu_reach(reach, k) > 0}
    engines: set[EngineKey] = set()
    if engine_reach(reach) > 0:
        engines = {engine_key(e) for s in snaps for e in s.engines}
        engines -= {engine_key(e) for e in first.engines}
    host = host_reach(reach) > 0 and first.host is None and any(s.host is not None for s in snaps)
    picked: dict[int, tuple[Snapshot, set[GpuKey], set[EngineKey], bool]] = {}
    for i in range(len(before) - 1, -1, -1):
        if not (gpus or engines or host):
            break
        snap = before[i]
        back = first.t - snap.t
        gpus -= {k for k in gpus if back > gpu_reach(reach, k)}
        if back > engine_reach(reach):
            engines = set()
        host = host and back <= host_reach(reach)
        g = gpus & {gpu_key(x) for x in snap.gpus}
        e = engines & {engine_key(x) for x in snap.engines}
        h = host and snap.host is not None
        if g or e or h:
            picked[i] = (snap, g, e, h)
            gpus, engines, host = gpus - g, engines - e, host and not h
    return [picked[i] for i in sorted(picked)]


def compute_window(
    snapshots: Sequence[Snapshot],
    start: float | None = None,
    end: float | None = None,
    reach: Reach | None = None,
) -> WindowStats:
    """Aggregate the snapshots whose monotonic time lies in [start, end]. With ``reach``,
    each GPU, engine and the host missing from the first of them whose source it names
    also takes its newest reading before ``start`` (none further back than its reach) as
    its baseline, as ``LiveWindow`` does: a source read every few ticks is missing from
    most snapshots, and a window holding one of its readings gives it no rate."""
    snaps = [
        s for s in snapshots if (start is None or s.t >= start) and (end is None or s.t <= end)
    ]
    if not snaps:
        return empty_stats(end if end is not None else 0.0)
    baselines: list[tuple[Snapshot, set[GpuKey], set[EngineKey], bool]] = []
    if reach and start is not None:
        before = [s for s in snapshots if s.t < start]
        baselines = _baselines(before, snaps[0], snaps, reach)
    gpu_groups: dict[GpuKey, tuple[list[GpuSample], list[float]]] = {}
    engine_groups: dict[EngineKey, tuple[list[EngineSample], list[float]]] = {}
    host_samples: list[HostSample] = []
    host_times: list[float] = []
    load_acc: dict[str, list[float]] = {}
    readings = [*baselines, *((s, None, None, True) for s in snaps)]
    for snap, only_gpus, only_engines, with_host in readings:
        for g in snap.gpus:
            if only_gpus is None or gpu_key(g) in only_gpus:
                gpu_samples, gpu_times = gpu_groups.setdefault(gpu_key(g), ([], []))
                gpu_samples.append(g)
                gpu_times.append(snap.t)
        for e in snap.engines:
            if only_engines is None or engine_key(e) in only_engines:
                samples, times = engine_groups.setdefault(engine_key(e), ([], []))
                samples.append(e)
                times.append(snap.t)
        if snap.host is not None and with_host:
            host_samples.append(snap.host)
            host_times.append(snap.t)
    for snap in snaps:
        for k, v in snap.load:
            load_acc.setdefault(k, []).append(v)
    return window_stats(
        snaps[0],
        snaps[-1],
        len(snaps),
        {k: _GpuList(s, t) for k, (s, t) in gpu_groups.items()},
        (_EngineList(s, t) for s, t in engine_groups.values()),
        _HostList(host_samples, host_times) if host_samples else None,
        ((k, sum(v) / len(v)) for k, v in load_acc.items()),
    )
