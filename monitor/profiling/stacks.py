"""py-spy's raw (collapsed) stacks -> per-thread function shares. Pure: no I/O.

One line of ``py-spy record --format raw --threads [--subprocesses]`` is::

    process 12:"python -m vllm...";thread (15): EngineCore;f (file.py:10);g (file.py:20) 73

(the ``process`` frames only with --subprocesses, outermost first; the thread's name
only when it has one), ending with the number of samples that had that exact stack.
Without ``--idle`` py-spy keeps only samples in which the thread was running, so a
thread's sample count follows its CPU time and a share is a share of its CPU.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

TOP = 10  # functions listed per thread

_PROCESS = re.compile(r'(?:^|;)process (\d+):"')
_THREAD = re.compile(r"(?:^|;)thread \((\d+|0x[0-9a-fA-F]+)\)(?:: ([^;]*))?(?:;|$)")
_FRAME = re.compile(r"^(.*) \(([^()]*):(\d+)\)$")

Classifier = Callable[[str, str], "str | None"]


@dataclass(frozen=True, slots=True)
class FunctionShare:
    function: str
    file: str
    line: int
    self_share: float  # of the thread's samples, with this function on top
    total_share: float  # of the thread's samples, with this function anywhere on the stack

    def to_json(self) -> dict[str, Any]:
        return {
            "function": self.function,
            "file": self.file,
            "line": self.line,
            "self_share": round(self.self_share, 4),
            "total_share": round(self.total_share, 4),
        }

    def where(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True, slots=True)
class ThreadProfile:
    """One thread's samples: the top functions by own time, and by time including callees."""

    pid: int
    tid: int
    thread: str
    samples: int
    functions: tuple[FunctionShare, ...]  # top by self_share
    inclusive: tuple[FunctionShare, ...]  # top by total_share
    # Share of samples per kind of work (see hot_path), the innermost matching frame deciding.
    kinds: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True, slots=True)
class CpuProfile:
    """A profile of one process (and its children): the target thread first, then the others."""

    pid: int
    tid: int
    thread: str
    samples: int
    seconds: float
    rate: int
    functions: tuple[FunctionShare, ...]
    inclusive: tuple[FunctionShare, ...] = ()
    kinds: tuple[tuple[str, float], ...] = ()
    others: tuple[ThreadProfile, ...] = ()
    wall: float = 0.0  # Unix time the sampling ended
    notes: tuple[str, ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        """The object of ``engines[].cpu_profile`` and the cpu-bound evidence: add, never rename."""
        return {
            "pid": self.pid,
            "tid": self.tid,
            "thread": self.thread,
            "samples": self.samples,
            "seconds": round(self.seconds, 3),
            "rate": self.rate,
            "time": self.wall,
            "functions": [f.to_json() for f in self.functions],
            "inclusive": [f.to_json() for f in self.inclusive],
            "kinds": {k: round(v, 4) for k, v in self.kinds},
            "threads": [
                {
                    "pid": t.pid,
                    "tid": t.tid,
                    "thread": t.thread,
                    "samples": t.samples,
                    "functions": [f.to_json() for f in t.functions[:3]],
                }
                for t in self.others
            ],
            "notes": list(self.notes),
        }


@dataclass(frozen=True, slots=True)
class Stack:
    pid: int | None  # the innermost process frame, when py-spy followed subprocesses
    tid: int
    thread: str
    frames: tuple[tuple[str, str, int], ...]  # (function, file, line), outermost first
    count: int


def parse_line(line: str) -> Stack | None:
    """One raw line, or None for a line that is not a stack (blank, or a format we do not know)."""
    line = line.rstrip("\n")
    head, sep, count_s = line.rpartition(" ")
    if not sep or not count_s.isdigit():
        return None
    # py-spy does not escape quotes inside a process's command line (vLLM's JSON flags hold
    # some), so the process frames cannot be split on quotes: the thread frame marks their end.
    m = _THREAD.search(head)
    if m is None:
        return None
    pids = _PROCESS.findall(head, 0, m.start())
    pid = int(pids[-1]) if pids else None
    tid_s = m.group(1)
    tid = int(tid_s, 16) if tid_s.startswith("0x") else int(tid_s)
    name = (m.group(2) or "").strip()
    rest = head[m.end() :]
    frames = []
    for part in rest.split(";") if rest else ():
        fm = _FRAME.match(part)
        if fm is None:
            frames.append((part, "", 0))  # a native or odd frame: keep its name
        else:
            frames.append((fm.group(1), fm.group(2), int(fm.group(3))))
    return Stack(pid, tid, name, tuple(frames), int(count_s))


def parse(text: str) -> list[Stack]:
    # A command line may hold newlines (python -c "..."): a record runs on until its thread
    # frame has been seen, so a line break inside a process frame does not end it.
    out = []
    buf = ""
    for ln in text.splitlines():
        buf = f"{buf} {ln}" if buf else ln
        if _THREAD.search(buf):
            stack = parse_line(buf)
            buf = ""
            if stack is not None:
                out.append(stack)
    return out


def _top(
    rank: dict[tuple[str, str, int], int],
    own: dict[tuple[str, str, int], int],
    incl: dict[tuple[str, str, int], int],
    n: int,
    total: int,
) -> tuple[FunctionShare, ...]:
    ranked = sorted(rank, key=lambda k: (-rank[k], k))[:n]
    return tuple(
        FunctionShare(k[0], k[1], k[2], own.get(k, 0) / total, incl.get(k, 0) / total)
        for k in ranked
        if rank[k] > 0
    )


def aggregate(
    stacks: Iterable[Stack], classify: Classifier | None = None, top: int = TOP
) -> list[ThreadProfile]:
    """Per thread: self and inclusive sample shares of each function, busiest thread first."""
    by_thread: dict[tuple[int | None, int], list[Stack]] = {}
    for s in stacks:
        by_thread.setdefault((s.pid, s.tid), []).append(s)
    out: list[ThreadProfile] = []
    for (pid, tid), group in by_thread.items():
        total = sum(s.count for s in group)
        if total <= 0:
            continue
        own: dict[tuple[str, str, int], int] = {}
        incl: dict[tuple[str, str, int], int] = {}
        kinds: dict[str, int] = {}
        for s in group:
            if s.frames:
                own[s.frames[-1]] = own.get(s.frames[-1], 0) + s.count
            for key in set(s.frames):  # a recursive function counts once per sample
                incl[key] = incl.get(key, 0) + s.count
            if classify is not None:
                for fn, file, _ in reversed(s.frames):
                    kind = classify(fn, file)
                    if kind is not None:
                        kinds[kind] = kinds.get(kind, 0) + s.count
                        break
        name = next((s.thread for s in group if s.thread), "")
        out.append(
            ThreadProfile(
                pid=pid if pid is not None else -1,
                tid=tid,
                thread=name,
                samples=total,
                functions=_top(own, own, incl, top, total),
                inclusive=_top(incl, own, incl, top, total),
                kinds=tuple(
                    sorted(((k, v / total) for k, v in kinds.items()), key=lambda kv: -kv[1])
                ),
            )
        )
    out.sort(key=lambda t: (-t.samples, t.tid))
    return out
