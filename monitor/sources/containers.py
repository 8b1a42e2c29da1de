"""Which container (and Kubernetes pod) a process runs in, from ``/proc/PID/cgroup``.

The runtimes name the cgroup after the container's id, so the path says it:

- docker: ``/docker/<id>`` (cgroupfs driver) or ``/system.slice/docker-<id>.scope``
- containerd under Kubernetes: ``.../cri-containerd-<id>.scope`` (systemd driver) or
  ``/kubepods/<qos>/pod<uid>/<id>`` (cgroupfs driver)
- cri-o: ``.../crio-<id>.scope`` (``crio-conmon-<id>.scope`` is its monitor, not the container)
- podman: ``.../libpod-<id>.scope``

A Kubernetes pod's UID is in the ``kubepods`` part of the path: ``pod<uid>`` with dashes
(cgroupfs) or underscores (systemd's ``kubepods-burstable-pod<uid>.slice``). Its name and
namespace are not in the cgroup; :class:`PodDirectory` maps the UID to them through the
directories the kubelet keeps for each pod's logs (``/var/log/pods/<ns>_<name>_<uid>``).
A process in its own cgroup namespace sees only ``0::/``: nothing to say, so None.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass

_ID = r"[0-9a-f]{64}"
# (runtime, pattern whose group 1 is the container id), tried in order on each path.
_RUNTIMES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("containerd", re.compile(rf"cri-containerd-({_ID})\.scope")),
    ("cri-o", re.compile(rf"crio-({_ID})\.scope")),
    ("podman", re.compile(rf"libpod-({_ID})\.scope")),
    ("docker", re.compile(rf"docker-({_ID})\.scope")),
    ("docker", re.compile(rf"/docker/({_ID})(?:/|$)")),
)
# cgroupfs driver under Kubernetes: /kubepods[/qos]/pod<uid>/<id>; the runtime is not named.
_KUBE_CGROUPFS = re.compile(rf"/kubepods(?:/[a-z]+)?/pod[0-9a-f-]+/({_ID})(?:/|$)")
_POD_UID = re.compile(
    r"kubepods\S*?pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})"
)

SHORT_ID = 12  # what `docker ps` and `crictl ps` show, and accept


@dataclass(frozen=True, slots=True)
class ContainerRef:
    container: str | None  # the id, SHORT_ID hex digits; None: in a pod, id not found
    runtime: str | None  # "docker", "containerd", "cri-o", "podman", or None (kubepods cgroupfs)
    pod_uid: str | None  # Kubernetes pod UID with dashes, or None


def parse_cgroup(text: str) -> ContainerRef | None:
    """The container of a process from its ``/proc/PID/cgroup`` text, or None (a host process)."""
    paths = []
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and parts[2]:
            paths.append(parts[2].strip())
    container = runtime = pod_uid = None
    for path in paths:
        if pod_uid is None:
            m = _POD_UID.search(path)
            if m:
                pod_uid = m.group(1).replace("_", "-")
        if container is None:
            for name, pattern in _RUNTIMES:
                m = pattern.search(path)
                if m:
                    container, runtime = m.group(1), name
                    break
            else:
                m = _KUBE_CGROUPFS.search(path)
                if m:
                    container = m.group(1)
    if container is None and pod_uid is None:
        return None
    return ContainerRef(container[:SHORT_ID] if container else None, runtime, pod_uid)


def read_cgroup(pid: int, proc: str = "/proc") -> ContainerRef | None:
    try:
        with open(f"{proc}/{pid}/cgroup", encoding="utf-8", errors="replace") as fh:
            return parse_cgroup(fh.read())
    except OSError:
        return None


class PodDirectory:
    """Pod UID -> (namespace, name), from the kubelet's per-pod log directories.

    The kubelet names each pod's log directory ``<namespace>_<name>_<uid>`` (namespace and
    pod names cannot hold ``_``). Read where headroom sees the host's ``/var/log/pods``
    (a DaemonSet mounting it, or headroom on the node itself); listed again at most every
    ``every_s`` seconds, and at once for a UID not yet seen, since pods come and go.
    """

    def __init__(
        self,
        root: str = "/var/log/pods",
        every_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.root = root
        self.every_s = every_s
        self._clock = clock
        self._pods: dict[str, tuple[str, str]] = {}
        self._next = -float("inf")
        self._last_miss = -float("inf")

    def _list(self) -> None:
        now = self._clock()
        self._next = now + self.every_s
        pods: dict[str, tuple[str, str]] = {}
        try:
            names = os.listdir(self.root)
        except OSError:
            names = []
        for name in names:
            parts = name.split("_")
            if len(parts) == 3 and parts[2]:
                pods[parts[2]] = (parts[0], parts[1])
        self._pods = pods

    def lookup(self, uid: str) -> tuple[str, str] | None:
        now = self._clock()
        if now >= self._next:
            self._list()
        elif uid not in self._pods and now - self._last_miss >= 1.0:
            self._last_miss = now  # a new pod: list again, but not for every PID of a tick
            self._list()
        return self._pods.get(uid)
