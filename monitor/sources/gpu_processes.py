"""Who a GPU process is: user, command line, container and pod, for a PID NVML lists.

NVML gives only PIDs and memory; this module looks each PID up once (cached by PID and
start time, so a reused PID is looked up again) through psutil and ``/proc/PID/cgroup``.
A PID that is not there is one NVML sees in another PID namespace: headroom runs in a
container without the host's PIDs (docker ``--pid=host``, Kubernetes ``hostPID: true``
give them). Then the process is marked not visible rather than "no such process".
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import psutil

from monitor.sources.containers import PodDirectory, read_cgroup

log = logging.getLogger(__name__)

COMMAND_MAX = 200  # characters of the command line kept: enough to tell two pythons apart


@dataclass(frozen=True, slots=True)
class Identity:
    user: str | None
    command: str | None
    container: str | None
    runtime: str | None
    pod_uid: str | None
    pod: str | None
    namespace: str | None


class ProcessIdentities:
    """Looks PIDs up; ``identify`` answers None for a PID not visible from here."""

    def __init__(self, proc: str = "/proc", pods: PodDirectory | None = None) -> None:
        self._proc = proc
        self._pods = pods if pods is not None else PodDirectory()
        self._cache: dict[int, tuple[float, Identity]] = {}

    def identify(self, pid: int) -> Identity | None:
        try:
            p = psutil.Process(pid)
            started = p.create_time()
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            self._cache.pop(pid, None)
            return None
        except psutil.AccessDenied:
            started = 0.0
            p = None
        cached = self._cache.get(pid)
        if cached is not None and cached[0] == started:
            return cached[1]
        ident = self._look_up(pid, p)
        self._cache[pid] = (started, ident)
        return ident

    def _look_up(self, pid: int, p: psutil.Process | None) -> Identity:
        user = command = None
        if p is not None:
            try:
                user = p.username()
            except (psutil.Error, KeyError):
                # A UID with no name here (a container's user): show the number.
                try:
                    user = str(p.uids().real)
                except psutil.Error:
                    user = None
            try:
                argv = p.cmdline()
                command = " ".join(argv)[:COMMAND_MAX] if argv else p.name()
            except psutil.Error:
                command = None
        ref = read_cgroup(pid, self._proc)
        pod = namespace = None
        if ref is not None and ref.pod_uid is not None:
            found = self._pods.lookup(ref.pod_uid)
            if found is not None:
                namespace, pod = found
        return Identity(
            user=user,
            command=command,
            container=ref.container if ref else None,
            runtime=ref.runtime if ref else None,
            pod_uid=ref.pod_uid if ref else None,
            pod=pod,
            namespace=namespace,
        )

    def keep_only(self, pids: set[int]) -> None:
        """Forget PIDs no GPU lists any more (the cache stays as small as the GPUs' lists)."""
        for pid in [p for p in self._cache if p not in pids]:
            del self._cache[pid]
