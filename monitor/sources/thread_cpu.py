"""Each thread's CPU time for the engine's processes, cheaply enough for every tick.

An engine process has tens to hundreds of threads (PyTorch's pools, NCCL, CUDA, the
tokenizer, the API server) and a few of them do the work. Reading every thread's
``/proc/PID/task/TID/schedstat`` costs 13-19 us a thread: 4.7 ms a tick for four
tensor-parallel ranks of ~90 threads each. So between full reads only the hot threads
are read (those that ran at least 1% of a core since the full read before), and the
process's own CPU total (which the caller has from one read of ``/proc/PID/stat``)
tells how much the others ran: once that passes 50 ms of CPU, or 10 s have gone by,
every thread is read again in the same tick. A cold thread's figure is so never more
than ~50 ms of CPU behind (plus the 10 ms ticks of ``/stat``), and a thread that wakes
up and burns is read in full within 50 ms of its CPU.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from monitor.sources.procfs import KeptFiles

HOT_SHARE = 0.01  # of a core, since the previous full read: read every tick
STALE_CPU_S = 0.05  # CPU the cold threads may run between full reads
FULL_EVERY_S = 10.0  # new threads appear, hot ones cool down


def read_small(path: str) -> bytes | None:
    # os.open/os.read: a third of what a Python file object costs, and this runs for
    # every hot thread of every engine process on every tick.
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        return os.read(fd, 512)
    except OSError:
        return None
    finally:
        os.close(fd)


def _runtime(data: bytes) -> float:
    """The scheduler's runtime counter: nanoseconds on CPU, user and system together."""
    return int(data.split(None, 1)[0]) * 1e-9


def read_all(pid: int, known: dict[int, float] | None = None) -> dict[int, float] | None:
    """Every thread's CPU seconds from schedstat (those in `known` not read again), or
    None where the kernel has no schedstat (the caller falls back to psutil).

    Raises ProcessLookupError when the process has gone: that says nothing of the kernel."""
    base = f"/proc/{pid}/task/"
    try:
        tids = os.listdir(base)
    except FileNotFoundError:
        if os.path.isdir("/proc/self/task"):
            raise ProcessLookupError(pid) from None
        return None
    except OSError:
        return None
    out: dict[int, float] = {}
    for name in tids:
        tid = int(name)
        if known is not None and tid in known:
            out[tid] = known[tid]
            continue
        data = read_small(base + name + "/schedstat")
        if data is None:
            if os.path.exists(base + name):
                return None
            continue  # the thread ended between listing and reading
        try:
            out[tid] = _runtime(data)
        except (ValueError, IndexError):
            return None
    return out


@dataclass
class _Process:
    full_at: float  # clock of the last full read
    next_full: float
    cpu_at_full: float  # the process's CPU total then
    at_full: dict[int, float]  # every thread's CPU then
    hot: tuple[int, ...]
    last: dict[int, float] = field(default_factory=dict)  # every thread's latest figure


class ThreadCpuReader:
    """Per-thread CPU of several processes, each read in full only when it must be."""

    def __init__(
        self, clock: Callable[[], float] = time.monotonic, files: KeptFiles | None = None
    ) -> None:
        self._clock = clock
        self._procs: dict[int, _Process] = {}
        # The hot threads' schedstat files, held open between ticks (procfs.KeptFiles).
        self._files = files
        self.full_reads = 0
        self.thread_reads = 0  # schedstat files read, full and hot: for tests and benches

    def forget(self, pid: int) -> None:
        self._procs.pop(pid, None)
        if self._files is not None:
            self._files.drop_under(f"/proc/{pid}/task/")

    def keep_only(self, pids: set[int]) -> None:
        for pid in list(self._procs):
            if pid not in pids:
                self.forget(pid)

    def read(self, pid: int, process_cpu: float) -> dict[int, float] | None:
        """{tid: CPU seconds} for every thread of `pid`; None without schedstat.

        `process_cpu` is the process's own CPU total (user + system) read just before."""
        now = self._clock()
        state = self._procs.get(pid)
        if state is None or now >= state.next_full:
            return self._full(pid, process_cpu, now, state, None)
        base = f"/proc/{pid}/task/"
        fresh: dict[int, float] = {}
        files = self._files
        for tid in state.hot:
            path = f"{base}{tid}/schedstat"
            data = files.read(path, 128) if files is not None else read_small(path)
            self.thread_reads += 1
            if data is not None:
                try:
                    fresh[tid] = _runtime(data)
                except (ValueError, IndexError):
                    continue
        explained = sum(v - state.at_full.get(tid, v) for tid, v in fresh.items())
        if process_cpu - state.cpu_at_full - explained > STALE_CPU_S:
            return self._full(pid, process_cpu, now, state, fresh)
        if len(fresh) < len(state.hot):  # some ended: stop reading them
            for tid in state.hot:
                if tid not in fresh:
                    state.last.pop(tid, None)
            state.hot = tuple(fresh)
        state.last.update(fresh)
        return state.last

    def _full(
        self,
        pid: int,
        process_cpu: float,
        now: float,
        before: _Process | None,
        fresh: dict[int, float] | None,
    ) -> dict[int, float] | None:
        threads = read_all(pid, fresh)
        self.full_reads += 1
        if threads is None:
            self._procs.pop(pid, None)
            return None
        self.thread_reads += len(threads) - len(fresh or ())
        if before is None:
            # Nothing to tell hot from cold yet: every thread is hot until the next tick's
            # full read gives each a rate.
            hot = tuple(threads)
            next_full = now
        else:
            elapsed = max(now - before.full_at, 1e-9)
            hot = tuple(
                tid
                for tid, cpu in threads.items()
                if tid not in before.at_full or cpu - before.at_full[tid] >= HOT_SHARE * elapsed
            )
            next_full = now + FULL_EVERY_S
        if self._files is not None:
            base = f"/proc/{pid}/task/"
            self._files.keep_only({f"{base}{tid}/schedstat" for tid in hot}, base)
        self._procs[pid] = _Process(
            full_at=now,
            next_full=next_full,
            cpu_at_full=process_cpu,
            at_full=threads,
            hot=hot,
            last=dict(threads),
        )
        return self._procs[pid].last
