"""Host source: system CPU and the CPU of the engine's processes and threads.

The engine's processes are the given PIDs, or the local processes listening on
the given TCP ports (vLLM's API server), plus all their descendants (vLLM's
engine core is a child process). Finding them walks every process, so it runs
at most every ``rediscover_s`` seconds; each tick only reads the CPU times of
the processes already found. A process that exits is dropped, never an error.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable, Sequence

import psutil

from monitor.sources.base import Reading
from monitor.sources.proc_tree import ProcTree
from monitor.sources.procfs import KeptFiles, host_cpu, process_stat
from monitor.sources.samples import HostSample, ProcessCpu, SourceError, ThreadCpu
from monitor.sources.thread_cpu import ThreadCpuReader

log = logging.getLogger(__name__)

_GONE = (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied)


def _cpu_totals(files: KeptFiles | None = None) -> tuple[float, float, float | None]:
    if files is not None:
        data = files.read("/proc/stat", 512)
        got = host_cpu(data) if data is not None else None
        if got is not None:
            return got
    t = psutil.cpu_times()
    fields = t._asdict()
    total = sum(fields.values())
    # Linux counts guest time inside user and nice already: do not count it twice.
    total -= fields.get("guest", 0.0) + fields.get("guest_nice", 0.0)
    idle = fields.get("idle", 0.0) + fields.get("iowait", 0.0)
    steal = fields.get("steal")
    return total, idle, steal


def _cpu_freq() -> tuple[float | None, float | None]:
    try:
        f = psutil.cpu_freq()
    except (OSError, NotImplementedError, RuntimeError):
        return None, None
    if f is None:
        return None, None
    current = f.current if f.current and f.current > 0 else None
    top = f.max if f.max and f.max > 0 else None
    return current, top


def _thread_name(pid: int, tid: int) -> str:
    try:
        with open(f"/proc/{pid}/task/{tid}/comm", encoding="utf-8", errors="replace") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def _listeners(ports: set[int]) -> tuple[dict[int, set[int]], set[int]]:
    """PIDs listening on each of ``ports``, and the ports whose listener we cannot see."""
    found: dict[int, set[int]] = {}
    hidden: set[int] = set()
    try:
        conns = psutil.net_connections(kind="tcp")
    except psutil.AccessDenied:
        conns = []
        for proc in psutil.process_iter():
            try:
                for c in proc.net_connections(kind="tcp"):
                    conns.append(c._replace(pid=proc.pid))  # type: ignore[attr-defined]
            except _GONE:
                continue
    for c in conns:
        if c.status != psutil.CONN_LISTEN or not c.laddr or c.laddr.port not in ports:
            continue
        if c.pid is None:
            hidden.add(c.laddr.port)  # another user's process: its fds are not ours to read
        else:
            found.setdefault(c.laddr.port, set()).add(c.pid)
    return found, hidden


class HostSource:
    """Reads host CPU times and the engine processes' CPU each tick; never raises."""

    name = "host"

    def __init__(
        self,
        pids: Sequence[int] = (),
        ports: Sequence[int] = (),
        rediscover_s: float = 10.0,
        freq_every_s: float = 10.0,
        *,
        clock: Callable[[], float] = time.monotonic,
        one_shot: bool = False,
    ) -> None:
        # A one-shot reading (snapshot) promises no later look in its notes.
        self.one_shot = one_shot
        self.pids = tuple(int(p) for p in pids)
        self.ports = tuple(int(p) for p in ports)
        self.rediscover_s = float(rediscover_s)
        # psutil.cpu_freq() reads three files per CPU (hundreds on a big host) for a
        # figure that changes slowly and no rule acts on: refresh it now and then.
        self.freq_every_s = float(freq_every_s)
        self._freq: tuple[float | None, float | None] = (None, None)
        self._next_freq = -float("inf")
        self._schedstat = sys.platform.startswith("linux")
        # /proc/stat, each process's stat and each hot thread's schedstat, held open.
        self._files = KeptFiles() if os.path.isfile("/proc/self/stat") else None
        self._thread_cpu = ThreadCpuReader(clock, self._files)
        # Each process's name by the kernel's short name (comm) it was read under.
        self._names: dict[int, tuple[str, str]] = {}
        # The same ThreadCpu again while a thread's figure has not moved (most of them).
        self._thread_samples: dict[tuple[int, int], ThreadCpu] = {}
        self._clock = clock
        self._procs: dict[int, psutil.Process] = {}
        self._thread_names: dict[tuple[int, int], str] = {}
        self._next_discovery = -float("inf")
        # The ports' listeners as last found (ports, PIDs): while each still runs, a new look
        # need not list every socket on the box (psutil.net_connections: ~5 ms, every 10 s).
        self._port_roots: tuple[tuple[int, ...], set[int]] | None = None
        self._tree = ProcTree()
        self._cpu_count = psutil.cpu_count() or os.cpu_count() or 1
        notes = self._discover()
        self.notes: tuple[str, ...] = tuple(notes)

    @property
    def tracked_pids(self) -> tuple[int, ...]:
        return tuple(sorted(self._procs))

    def _discover(self) -> list[str]:
        """Find the engine's processes again; return notes on what could not be found."""
        self._next_discovery = self._clock() + self.rediscover_s
        notes: list[str] = []
        roots: set[int] = set()
        for pid in self.pids:
            if psutil.pid_exists(pid):
                roots.add(pid)
            else:
                notes.append(f"host: no process {pid} (has it exited?)")
        known = self._port_roots
        if self.ports and known is not None and known[0] == self.ports and self._alive(known[1]):
            roots |= known[1]
        elif self.ports:
            self._port_roots = None
            try:
                found, hidden = _listeners(set(self.ports))
            except (OSError, psutil.Error) as exc:
                found, hidden = {}, set()
                notes.append(f"host: cannot list listening sockets ({exc}); pass the engine's PID")
            for port in self.ports:
                if port in found:
                    roots |= found[port]
                elif port in hidden:
                    notes.append(
                        f"host: port {port} is served by another user's process; "
                        "run headroom as that user or pass its PID"
                    )
                else:
                    notes.append(
                        f"host: no local process listens on TCP port {port}"
                        if self.one_shot
                        else f"host: no local process listens on TCP port {port} (yet); "
                        f"looking again every {self.rediscover_s:g} s"
                    )
            if all(port in found for port in self.ports):
                self._port_roots = (self.ports, {pid for port in self.ports for pid in found[port]})
        procs: dict[int, psutil.Process] = {}
        if self._tree.available:
            try:
                self._tree.refresh()
                family_pids = roots | self._tree.descendants(roots)
            except OSError:
                family_pids = None
            if family_pids is not None:
                for pid in sorted(family_pids):
                    try:
                        # Keep the Process objects we have: psutil checks them against PID reuse.
                        procs[pid] = self._procs.get(pid) or psutil.Process(pid)
                    except _GONE:
                        continue
                roots = set()  # found: the loop below has nothing left to do
        for pid in sorted(roots):
            try:
                root = self._procs.get(pid) or psutil.Process(pid)
                family = [root, *root.children(recursive=True)]
            except _GONE:
                continue
            for p in family:
                # Keep the Process objects we have: psutil checks them against PID reuse.
                procs.setdefault(p.pid, self._procs.get(p.pid, p))
        for pid in set(self._procs) - set(procs):
            self._forget(pid)
        self._procs = procs
        self._thread_cpu.keep_only(set(procs))
        self._thread_samples = {}
        # Thread names are cached between discoveries; a renamed or reused thread id is
        # picked up at the next one.
        self._thread_names = {}
        return notes

    def _alive(self, pids: set[int]) -> bool:
        for pid in pids:
            proc = self._procs.get(pid)
            try:
                if not (proc.is_running() if proc is not None else psutil.pid_exists(pid)):
                    return False
            except _GONE:
                return False
        return True

    def _threads(self, proc: psutil.Process, process_cpu: float) -> list[tuple[int, float]]:
        if self._schedstat:
            fast = self._thread_cpu.read(proc.pid, process_cpu)
            if fast is not None:
                return list(fast.items())
            self._schedstat = False  # not on this kernel: do not try again each tick
        return [(th.id, th.user_time + th.system_time) for th in proc.threads()]

    def _stat(self, proc: psutil.Process) -> tuple[str, float]:
        """The process's name and CPU seconds; raises psutil's errors when it has gone."""
        if self._files is not None:
            data = self._files.read(f"/proc/{proc.pid}/stat")
            if data is None:
                raise psutil.NoSuchProcess(proc.pid)
            got = process_stat(data)
            if got is not None:
                comm, cpu = got
                known = self._names.get(proc.pid)
                if known is None or known[0] != comm:
                    # psutil's name: the command line's when the kernel's is cut at 15 chars.
                    known = self._names[proc.pid] = (comm, proc.name())
                return known[1], cpu
        with proc.oneshot():
            times = proc.cpu_times()
            return proc.name(), times.user + times.system

    def _process(self, proc: psutil.Process) -> ProcessCpu | None:
        try:
            name, process_cpu = self._stat(proc)
            threads = self._threads(proc, process_cpu)
        except (*_GONE, ProcessLookupError):
            self._forget(proc.pid)
            return None
        out = []
        for tid, cpu in threads:
            key = (proc.pid, tid)
            sample = self._thread_samples.get(key)
            if sample is None or sample.cpu_seconds != cpu:
                tname = self._thread_names.get(key)
                if tname is None:
                    tname = _thread_name(proc.pid, tid)
                    if tname:
                        self._thread_names[key] = tname
                sample = self._thread_samples[key] = ThreadCpu(tid, tname, cpu)
            out.append(sample)
        return ProcessCpu(proc.pid, name, process_cpu, tuple(out))

    def _forget(self, pid: int) -> None:
        self._thread_cpu.forget(pid)
        self._names.pop(pid, None)
        if self._files is not None:
            self._files.drop(f"/proc/{pid}/stat")

    def read(self) -> Reading:
        try:
            if self._clock() >= self._next_discovery and (self.pids or self.ports):
                self._discover()
            total, idle, steal = _cpu_totals(self._files)
            now = self._clock()
            if now >= self._next_freq:
                self._freq = _cpu_freq()
                self._next_freq = now + self.freq_every_s
            freq, freq_max = self._freq
            processes = []
            for pid in sorted(self._procs):
                p = self._process(self._procs[pid])
                if p is None:
                    del self._procs[pid]  # exited: found again only if it comes back
                    continue
                processes.append(p)
        except Exception as exc:  # psutil on an odd platform must cost one reading only
            log.warning("host source failed", exc_info=True)
            return Reading(errors=(SourceError(self.name, "", f"cannot read host CPU: {exc}"),))
        return Reading(
            host=HostSample(
                cpu_count=self._cpu_count,
                cpu_total_seconds=total,
                cpu_idle_seconds=idle,
                cpu_steal_seconds=steal,
                cpu_freq_mhz=freq,
                cpu_freq_max_mhz=freq_max,
                processes=tuple(processes),
            )
        )

    def close(self) -> None:
        self._procs.clear()
        if self._files is not None:
            self._files.close()
