"""Record a watch session to JSONL and read it back.

A recording is one JSON object per line. The first line is a header
(``{"headroom_recording": 1, ...}``: how the session was sampled and
diagnosed, so a replay can recompute the same verdicts); every other line is
one tick: ``{"snapshot": <raw Snapshot>, "report": <report dict>}``. The
snapshot is ``null`` when the session read a remote agent, which only hands
out reports.

Snapshots round-trip exactly: tuples come back as tuples, and the infinite
histogram bound (``+Inf``) and NaN, which JSON cannot spell, travel as strings.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO, TypeVar

from monitor.core.errors import ConfigError
from monitor.sources import samples

RECORDING_VERSION = 1
_HEADER_KEY = "headroom_recording"
T = TypeVar("T")


def _num(v: float | None) -> float | str | None:
    """A float JSON can carry: infinities and NaN become the strings Prometheus uses."""
    if v is None or isinstance(v, int):
        return v
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return v


def _float(v: Any) -> float | None:
    if v is None:
        return None
    if isinstance(v, str):
        return float(v.replace("Inf", "inf"))
    return v


def _pairs(v: Any) -> tuple[tuple[str, str], ...]:
    return tuple((str(a), str(b)) for a, b in v)


Convert = Callable[[Any], Any]


def _same(v: Any) -> Any:
    return v


def _fields_to_dict(obj: Any, special: Mapping[str, Convert], other: Convert) -> dict[str, Any]:
    """Every slot of a sample, each through its own converter or ``other``."""
    return {name: special.get(name, other)(getattr(obj, name)) for name in type(obj).__slots__}


def _fields_from_dict(
    cls: type[T], d: Mapping[str, Any], special: Mapping[str, Convert], other: Convert
) -> T:
    """A sample from the slots ``d`` has (older recordings lack newer fields: their defaults)."""
    return cls(**{n: special.get(n, other)(d[n]) for n in cls.__slots__ if n in d})


def _optional(convert: Convert) -> Convert:
    return lambda v: None if v is None else convert(v)


_GPU_TO: dict[str, Convert] = {
    "throttle_reasons": _optional(list),
    "labels": lambda v: [list(p) for p in v],
    "processes": _optional(
        lambda v: [{k: getattr(p, k) for k in samples.GpuProcess.__slots__} for p in v]
    ),
}
_GPU_FROM: dict[str, Convert] = {
    "throttle_reasons": _optional(tuple),
    "labels": _pairs,
    "processes": _optional(
        lambda v: tuple(
            samples.GpuProcess(**{k: x for k, x in p.items() if k in samples.GpuProcess.__slots__})
            for p in v
        )
    ),
    # Text fields stay text; any other string is a float JSON cannot spell (+Inf, NaN).
    **dict.fromkeys(("uuid", "name", "source", "energy_source"), _same),
}


def _gpu_to_dict(g: samples.GpuSample) -> dict[str, Any]:
    return _fields_to_dict(g, _GPU_TO, lambda v: _num(v) if isinstance(v, float) else v)


def _gpu_from_dict(d: Mapping[str, Any]) -> samples.GpuSample:
    return _fields_from_dict(
        samples.GpuSample, d, _GPU_FROM, lambda v: _float(v) if isinstance(v, str) else v
    )


def _hist_to_dict(h: samples.Histogram) -> dict[str, Any]:
    return {
        "buckets": [[_num(le), _num(c)] for le, c in h.buckets],
        "sum": _num(h.sum),
        "count": _num(h.count),
    }


def _hist_from_dict(d: Mapping[str, Any]) -> samples.Histogram:
    return samples.Histogram(
        buckets=tuple((_float(le), _float(c)) for le, c in d["buckets"]),
        sum=_float(d["sum"]),
        count=_float(d["count"]),
    )


_ENGINE_TEXT = dict.fromkeys(
    ("url", "model_name", "engine", "flavour", "flavour_version", "reported_caps_origin"), _same
)
_ENGINE_TO: dict[str, Convert] = {
    "histograms": lambda v: [[k, _hist_to_dict(h)] for k, h in v],
    "cache_config": lambda v: [list(p) for p in v],
    "missing": lambda v: [[f, list(names)] for f, names in v],
    **_ENGINE_TEXT,
}
_ENGINE_FROM: dict[str, Convert] = {
    "histograms": lambda v: tuple((k, _hist_from_dict(h)) for k, h in v),
    "cache_config": _pairs,
    "missing": lambda v: tuple((str(f), tuple(str(n) for n in names)) for f, names in v),
    **_ENGINE_TEXT,
}


def _engine_to_dict(e: samples.EngineSample) -> dict[str, Any]:
    return _fields_to_dict(e, _ENGINE_TO, _num)


def _engine_from_dict(d: Mapping[str, Any]) -> samples.EngineSample:
    return _fields_from_dict(samples.EngineSample, d, _ENGINE_FROM, _float)


def _host_to_dict(h: samples.HostSample) -> dict[str, Any]:
    return {
        "cpu_count": h.cpu_count,
        "cpu_total_seconds": h.cpu_total_seconds,
        "cpu_idle_seconds": h.cpu_idle_seconds,
        "cpu_steal_seconds": h.cpu_steal_seconds,
        "cpu_freq_mhz": h.cpu_freq_mhz,
        "cpu_freq_max_mhz": h.cpu_freq_max_mhz,
        "processes": [
            {
                "pid": p.pid,
                "name": p.name,
                "cpu_seconds": p.cpu_seconds,
                "threads": [[t.tid, t.name, t.cpu_seconds] for t in p.threads],
            }
            for p in h.processes
        ],
    }


def _host_from_dict(d: Mapping[str, Any]) -> samples.HostSample:
    return samples.HostSample(
        cpu_count=d["cpu_count"],
        cpu_total_seconds=d["cpu_total_seconds"],
        cpu_idle_seconds=d["cpu_idle_seconds"],
        cpu_steal_seconds=d.get("cpu_steal_seconds"),
        cpu_freq_mhz=d.get("cpu_freq_mhz"),
        cpu_freq_max_mhz=d.get("cpu_freq_max_mhz"),
        processes=tuple(
            samples.ProcessCpu(
                pid=p["pid"],
                name=p["name"],
                cpu_seconds=p["cpu_seconds"],
                threads=tuple(samples.ThreadCpu(tid, name, cpu) for tid, name, cpu in p["threads"]),
            )
            for p in d.get("processes", ())
        ),
    )


def snapshot_to_dict(snap: samples.Snapshot) -> dict[str, Any]:
    """A JSON-able dict of one raw snapshot (see ``snapshot_from_dict``)."""
    return {
        "t": snap.t,
        "wall": snap.wall,
        "gpus": [_gpu_to_dict(g) for g in snap.gpus],
        "engines": [_engine_to_dict(e) for e in snap.engines],
        "host": _host_to_dict(snap.host) if snap.host is not None else None,
        "errors": [[e.source, e.target, e.message] for e in snap.errors],
        "duration_s": snap.duration_s,
        "load": [[k, _num(v)] for k, v in snap.load],
    }


def snapshot_from_dict(d: Mapping[str, Any]) -> samples.Snapshot:
    """The exact Snapshot that ``snapshot_to_dict`` wrote."""
    return samples.Snapshot(
        t=d["t"],
        wall=d["wall"],
        gpus=tuple(_gpu_from_dict(g) for g in d.get("gpus", ())),
        engines=tuple(_engine_from_dict(e) for e in d.get("engines", ())),
        host=_host_from_dict(d["host"]) if d.get("host") is not None else None,
        errors=tuple(samples.SourceError(s, t, m) for s, t, m in d.get("errors", ())),
        duration_s=d.get("duration_s", 0.0),
        load=tuple((str(k), _float(v)) for k, v in d.get("load", ())),
    )


@dataclass(frozen=True, slots=True)
class RecordedTick:
    snapshot: samples.Snapshot | None
    report: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class Recording:
    """A recording read back: its header (how it was sampled) and its ticks, oldest first."""

    header: dict[str, Any] = field(default_factory=dict)
    ticks: tuple[RecordedTick, ...] = ()

    @property
    def window_s(self) -> float | None:
        v = self.header.get("window_s")
        return float(v) if v is not None else None

    @property
    def interval_s(self) -> float | None:
        v = self.header.get("interval_s")
        return float(v) if v is not None else None


class Recorder:
    """Appends one line per tick; each line is flushed so a crash loses at most the tick in flight."""

    def __init__(self, path: str | Path, header: Mapping[str, Any] | None = None) -> None:
        self.path = Path(path)
        self.lines = 0
        self._lock = threading.Lock()
        if self.path.exists() and self.path.stat().st_size > 0:
            # Appending would splice two sessions whose clocks do not line up.
            raise ConfigError(f"{self.path} already exists: record to a new file")
        try:
            self._fh: TextIO | None = self.path.open("a", encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot record to {self.path}: {exc.strerror or exc}") from exc
        meta = {_HEADER_KEY: RECORDING_VERSION, **dict(header or {})}
        self._write(meta)

    def _write(self, obj: Mapping[str, Any]) -> None:
        line = json.dumps(obj, separators=(",", ":"), allow_nan=False)
        with self._lock:
            if self._fh is None:
                return
            self._fh.write(line + "\n")
            self._fh.flush()

    def write(self, snapshot: samples.Snapshot | None, report: Mapping[str, Any] | None) -> None:
        self._write(
            {
                "snapshot": snapshot_to_dict(snapshot) if snapshot is not None else None,
                "report": _json_safe(report),
            }
        )
        self.lines += 1

    def close(self) -> None:
        with self._lock:
            if self._fh is not None:
                self._fh.close()
                self._fh = None

    @property
    def closed(self) -> bool:
        return self._fh is None


def _json_safe(obj: Any) -> Any:
    """Reports may carry an infinite figure (a rate that would never fill): keep the line valid JSON."""
    if isinstance(obj, float):
        return _num(obj)
    if isinstance(obj, Mapping):
        return {k: _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    return obj


def iter_recording(path: str | Path) -> Iterator[dict[str, Any]]:
    p = Path(path)
    try:
        fh = p.open(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read recording {p}: {exc.strerror or exc}") from exc
    with fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                # The last line of a recording cut by a crash may be partial: keep what came before.
                if fh.read(1) == "":
                    return
                raise ConfigError(f"{p}:{lineno}: not a JSON line ({exc.msg})") from exc
            if not isinstance(obj, dict):
                raise ConfigError(f"{p}:{lineno}: expected a JSON object")
            yield obj


def read_recording(path: str | Path) -> Recording:
    """Read a whole recording; a malformed file raises ConfigError naming the line."""
    header: dict[str, Any] = {}
    ticks: list[RecordedTick] = []
    for i, obj in enumerate(iter_recording(path)):
        if _HEADER_KEY in obj:
            if not header:
                header = obj
            continue
        if "snapshot" not in obj and "report" not in obj:
            raise ConfigError(f"{path}: line {i + 1} is neither a header nor a tick")
        try:
            snap = snapshot_from_dict(obj["snapshot"]) if obj.get("snapshot") else None
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"{path}: line {i + 1}: malformed snapshot ({exc})") from exc
        ticks.append(RecordedTick(snap, obj.get("report")))
    if not ticks:
        raise ConfigError(f"{path}: the recording holds no ticks")
    return Recording(header, tuple(ticks))
