"""Summarise a torch-profiler trace (Chrome trace JSON, plain or gzipped). Pure but for reading it.

torch.profiler's ``export_chrome_trace`` (and vLLM's profiler, through
``tensorboard_trace_handler``) writes ``{"traceEvents": [...]}`` where each complete
event has ``"ph": "X"``, a category ``cat`` (``kernel`` for a GPU kernel, ``cuda_runtime``
for its launch, ``cpu_op`` for an ATen op, ``user_annotation`` for a ``record_function``
range), ``ts`` and ``dur`` in microseconds, ``pid``/``tid``, and in ``args`` a
``correlation`` id tying a kernel to its launch. An engine step is a user annotation:
vLLM 0.32 names each step ``execute_context_N(T)_generation_M(U)``, torch's scheduler
``ProfilerStep#N``.
"""

from __future__ import annotations

import gzip
import json
import re
import statistics
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from monitor.profiling.pyspy import ProfileError

KERNEL_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
LAUNCH_CATS = {"cuda_runtime", "cuda_driver"}
STEP_NAMES = r"^(execute_context|ProfilerStep#|headroom_step)"


@dataclass(frozen=True, slots=True)
class OpTime:
    name: str
    total_us: float
    calls: int
    share: float  # of all kernel (or CPU op self) time in the trace


@dataclass(frozen=True, slots=True)
class TraceSummary:
    path: str
    kind: str  # "kernels" or "cpu ops"
    top: tuple[OpTime, ...]
    kernels: int  # GPU kernels in the trace (0 for a CPU-only trace)
    steps: int
    kernels_per_step: float | None  # median over steps
    median_kernel_us: float | None
    idle_share: float | None  # median share of a step with no kernel running
    step_median_us: float | None
    notes: tuple[str, ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "kind": self.kind,
            "top": [
                {
                    "name": o.name,
                    "total_us": round(o.total_us, 1),
                    "calls": o.calls,
                    "share": round(o.share, 4),
                }
                for o in self.top
            ],  # fmt: skip
            "kernels": self.kernels,
            "steps": self.steps,
            "kernels_per_step": self.kernels_per_step,
            "median_kernel_us": self.median_kernel_us,
            "idle_share": None if self.idle_share is None else round(self.idle_share, 4),
            "step_median_us": self.step_median_us,
            "notes": list(self.notes),
        }


def load_events(path: str | Path) -> list[Mapping[str, Any]]:
    p = Path(path)
    try:
        raw = p.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        data = json.loads(raw)
    except (OSError, EOFError, zlib.error, ValueError, UnicodeDecodeError) as exc:
        raise ProfileError(f"trace {p} is unreadable: {type(exc).__name__}: {exc}") from None
    events = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise ProfileError(f"trace {p} is unreadable: no traceEvents list (not a Chrome trace)")
    return [e for e in events if isinstance(e, dict)]


def _complete(events: Iterable[Mapping[str, Any]], cats: set[str]) -> list[Mapping[str, Any]]:
    return [
        e
        for e in events
        if e.get("ph") == "X" and e.get("cat") in cats and isinstance(e.get("dur"), (int, float))
    ]


def _self_times(ops: Sequence[Mapping[str, Any]]) -> dict[int, float]:
    """Each CPU op's own time: its duration less that of the ops nested in it on its thread."""
    own: dict[int, float] = {}
    by_thread: dict[tuple[Any, Any], list[tuple[int, Mapping[str, Any]]]] = {}
    for i, e in enumerate(ops):
        by_thread.setdefault((e.get("pid"), e.get("tid")), []).append((i, e))
    for group in by_thread.values():
        group.sort(key=lambda ie: (float(ie[1]["ts"]), -float(ie[1]["dur"])))
        stack: list[tuple[int, float]] = []  # (index, end)
        for i, e in group:
            ts, dur = float(e["ts"]), float(e["dur"])
            while stack and stack[-1][1] <= ts:
                stack.pop()
            own[i] = dur
            if stack:
                parent = stack[-1][0]
                own[parent] = own.get(parent, 0.0) - dur
            stack.append((i, ts + dur))
    return {i: max(0.0, v) for i, v in own.items()}


def _top(names_times: Iterable[tuple[str, float]], n: int) -> tuple[OpTime, ...]:
    acc: dict[str, list[float]] = {}
    for name, t in names_times:
        acc.setdefault(name, []).append(t)
    total = sum(sum(v) for v in acc.values()) or 1.0
    ranked = sorted(acc.items(), key=lambda kv: -sum(kv[1]))[:n]
    return tuple(OpTime(name, sum(v), len(v), sum(v) / total) for name, v in ranked)


def _union(intervals: list[tuple[float, float]], lo: float, hi: float) -> float:
    covered = 0.0
    end = lo
    for a, b in sorted(intervals):
        a, b = max(a, end), min(b, hi)
        if b > a:
            covered += b - a
            end = b
    return covered


def summarise(path: str | Path, top: int = 10, step_names: str = STEP_NAMES) -> TraceSummary:
    events = load_events(path)
    kernels = _complete(events, KERNEL_CATS)
    step_re = re.compile(step_names)
    steps = [
        e for e in _complete(events, {"user_annotation"}) if step_re.search(str(e.get("name", "")))
    ]
    steps.sort(key=lambda e: float(e["ts"]))
    notes: list[str] = []
    if kernels:
        ranked = _top(((str(k.get("name")), float(k["dur"])) for k in kernels), top)
        kind = "kernels"
        # A kernel belongs to the step whose CPU range launched it (the launch's correlation id).
        launch_ts: dict[Any, float] = {}
        for e in _complete(events, LAUNCH_CATS):
            corr = (e.get("args") or {}).get("correlation")
            if corr is not None:
                launch_ts[corr] = float(e["ts"])
        stamped = [
            (launch_ts.get((k.get("args") or {}).get("correlation"), float(k["ts"])), k)
            for k in kernels
        ]
        per_step: list[int] = []
        idle: list[float] = []
        for s in steps:
            lo, hi = float(s["ts"]), float(s["ts"]) + float(s["dur"])
            mine = [k for t, k in stamped if lo <= t <= hi]
            per_step.append(len(mine))
            if not mine:
                idle.append(1.0)
                continue
            # The step spans its CPU range and the GPU work it launched, whichever ends later.
            end = max(hi, *(float(k["ts"]) + float(k["dur"]) for k in mine))
            span = end - lo
            busy = _union(
                [(float(k["ts"]), float(k["ts"]) + float(k["dur"])) for k in mine], lo, end
            )
            idle.append(1.0 - busy / span if span > 0 else 0.0)
        median_kernel = statistics.median(float(k["dur"]) for k in kernels)
        kernel_count = len(kernels)
    else:
        ops = _complete(events, {"cpu_op"})
        if not ops:
            raise ProfileError(
                f"trace {path} has no GPU kernels and no CPU ops: was anything running?"
            )
        own = _self_times(ops)
        ranked = _top(((str(ops[i].get("name")), t) for i, t in own.items()), top)
        kind = "cpu ops"
        per_step, idle = [], []
        for s in steps:
            lo, hi = float(s["ts"]), float(s["ts"]) + float(s["dur"])
            per_step.append(sum(1 for o in ops if lo <= float(o["ts"]) <= hi))
        median_kernel = None
        kernel_count = 0
        notes.append("no GPU kernels in this trace (a CPU engine, or CUDA activity not recorded)")
    if not steps:
        notes.append(f"no engine-step annotations ({step_names}) in this trace")
    return TraceSummary(
        path=str(path),
        kind=kind,
        top=ranked,
        kernels=kernel_count,
        steps=len(steps),
        kernels_per_step=float(statistics.median(per_step)) if per_step else None,
        median_kernel_us=None if median_kernel is None else round(median_kernel, 3),
        idle_share=statistics.median(idle) if idle else None,
        step_median_us=round(statistics.median(float(s["dur"]) for s in steps), 1)
        if steps
        else None,
        notes=tuple(notes),
    )


def render(s: TraceSummary) -> str:
    lines = [f"trace {s.path}"]
    if s.kind == "kernels":
        lines.append(
            f"  {s.kernels} kernels, {s.steps} engine steps; per step: "
            f"{_n(s.kernels_per_step, '.0f')} kernels (median), step {_n(s.step_median_us, '.0f')} us; "
            f"median kernel {_n(s.median_kernel_us, '.1f')} us; "
            f"no kernel running {_pct(s.idle_share)} of a step"
        )
    else:
        lines.append(
            f"  CPU ops only, {s.steps} engine steps; per step: {_n(s.kernels_per_step, '.0f')} "
            f"CPU ops (median), step {_n(s.step_median_us, '.0f')} us"
        )
    lines.append(f"  top {s.kind} by {'time' if s.kind == 'kernels' else 'own time'}:")
    for o in s.top:
        lines.append(
            f"    {100 * o.share:5.1f}%  {o.total_us / 1000:9.2f} ms  {o.calls:6d}x  {o.name[:90]}"
        )
    for note in s.notes:
        lines.append(f"  note: {note}")
    return "\n".join(lines)


def _n(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.0f}%"
