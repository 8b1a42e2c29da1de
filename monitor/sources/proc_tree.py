"""The engine's process tree, found again cheaply: a parent map kept between looks.

psutil's ``children(recursive=True)`` reads ``/proc/PID/stat`` of every process on
the box for each look (thousands on a serving node). The parent of a PID does not
change while it lives, so each look here lists ``/proc`` and reads only the PIDs
not seen at the look before.
"""

from __future__ import annotations

import os
import sys

from monitor.sources.thread_cpu import read_small


def _ppid(pid: int) -> int | None:
    data = read_small(f"/proc/{pid}/stat")
    if data is None:
        return None
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so cut at the last ")".
    try:
        return int(data[data.rindex(b")") + 2 :].split(None, 2)[1])
    except (ValueError, IndexError):
        return None


class ProcTree:
    """Descendants of some PIDs, from a parent map updated with the new PIDs only."""

    def __init__(self) -> None:
        self.available = sys.platform.startswith("linux") and os.path.isdir("/proc/self")
        self._parent: dict[int, int] = {}
        self.stat_reads = 0  # for tests: /proc/PID/stat files read

    def refresh(self) -> None:
        live = {int(name) for name in os.listdir("/proc") if name.isdigit()}
        for pid in self._parent.keys() - live:
            del self._parent[pid]
        for pid in live - self._parent.keys():
            ppid = _ppid(pid)
            self.stat_reads += 1
            if ppid is not None:
                self._parent[pid] = ppid

    def descendants(self, roots: set[int]) -> set[int]:
        """The roots' descendants (not the roots), as of the last refresh."""
        children: dict[int, list[int]] = {}
        for pid, ppid in self._parent.items():
            children.setdefault(ppid, []).append(pid)
        out: set[int] = set()
        todo = list(roots)
        while todo:
            for child in children.get(todo.pop(), ()):
                if child not in out and child not in roots:
                    out.add(child)
                    todo.append(child)
        return out
