"""Who holds each GPU: the engine's processes or others, and how much SM time each takes.

The engine's processes are the host source's (the process tree behind the vLLM port, or
``--pid``): a GPU process among them belongs to the engine, any other is "other". A
process NVML lists but headroom cannot see (another PID namespace) cannot be told either
way: its owner is None. Pure functions of a window, used by the report, the diagnosis
and the exporter alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from monitor.sources.samples import GpuProcess
from monitor.window.scopes import engine_scope
from monitor.window.stats import GpuWindow, WindowStats

OTHER = "other"
ENGINE = "engine"


def engine_name(window: WindowStats) -> str:
    """What an engine process is marked with: the engine's scope where one engine is
    watched (the string its verdicts carry), else "engine" (a ``--pid`` tree, or
    several engines watched together)."""
    if len(window.engines) == 1:
        return engine_scope(window.engines[0])
    return ENGINE


def owner(p: GpuProcess, window: WindowStats) -> str | None:
    """The engine's name, "other", or None for a process headroom cannot see."""
    pids = window.host.pids if window.host is not None else ()
    if p.pid in pids:
        return engine_name(window)
    if not p.visible:
        return None
    return OTHER


@dataclass(frozen=True, slots=True)
class Sharing:
    """One GPU's processes split by owner."""

    engine: tuple[GpuProcess, ...]
    other: tuple[GpuProcess, ...]  # visible processes outside the engine's tree
    unseen: tuple[GpuProcess, ...]  # PIDs NVML names that headroom cannot see

    @property
    def strangers(self) -> tuple[GpuProcess, ...]:
        """Every process not known to be the engine's (a hidden PID is not the engine's
        where the engine's own processes are seen)."""
        return self.other + (self.unseen if self.engine else ())

    @staticmethod
    def _sum(procs: Sequence[GpuProcess], attr: str) -> float | None:
        values = [getattr(p, attr) for p in procs]
        if not procs or any(v is None for v in values):
            return None
        return float(sum(values))

    @property
    def engine_sm_share(self) -> float | None:
        return self._sum(self.engine, "sm_share")

    @property
    def stranger_sm_share(self) -> float | None:
        return self._sum(self.strangers, "sm_share")

    @property
    def stranger_memory_bytes(self) -> float | None:
        return self._sum(self.strangers, "memory_bytes")


def sharing(g: GpuWindow, window: WindowStats) -> Sharing | None:
    """None when the GPU's processes were not read."""
    if g.processes is None:
        return None
    engine, other, unseen = [], [], []
    for p in g.processes:
        who = owner(p, window)
        (unseen if who is None else other if who == OTHER else engine).append(p)
    return Sharing(tuple(engine), tuple(other), tuple(unseen))


def processes_json(g: GpuWindow, window: WindowStats) -> list[dict[str, Any]] | None:
    if g.processes is None:
        return None
    return [
        {
            "pid": p.pid,
            "user": p.user,
            "command": p.command,
            "memory_bytes": p.memory_bytes,
            "sm_share": None if p.sm_share is None else round(p.sm_share, 4),
            "mem_share": None if p.mem_share is None else round(p.mem_share, 4),
            "engine": owner(p, window),
            "container": p.container,
            "runtime": p.runtime,
            "pod": p.pod,
            "namespace": p.namespace,
            "pod_uid": p.pod_uid,
            "visible": p.visible,
        }
        for p in sorted(g.processes, key=lambda p: -(p.memory_bytes or 0))
    ]


def hidden_pids_note(window: WindowStats) -> str | None:
    """One line when NVML names PIDs headroom cannot see: it runs in another PID namespace."""
    hidden = sorted({p.pid for g in window.gpus for p in (g.processes or ()) if not p.visible})
    if not hidden:
        return None
    shown = ", ".join(str(p) for p in hidden[:5]) + (" ..." if len(hidden) > 5 else "")
    return (
        f"GPU processes {shown}: NVML names these PIDs but they are not visible here; "
        "headroom runs in a container without the host's PID namespace (docker --pid=host, "
        "Kubernetes hostPID: true show them)"
    )
