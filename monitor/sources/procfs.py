"""Small /proc files held open and read again in place.

The host source reads the same few files every tick: the host's CPU line, each engine
process's ``stat`` and each hot thread's ``schedstat``. Opening one walks its path and
sets up a file every time, most of what a tick's read of it costs; a descriptor held
open and read with ``pread`` from offset 0 gets the kernel's fresh figures for the
price of one system call. A descriptor of a process or thread that has ended reads as
an error (ESRCH), never as another process that took its PID, so a failed read means
gone, and the file is dropped.
"""

from __future__ import annotations

import os

CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class KeptFiles:
    """Descriptors by path, opened on first read; at most ``limit`` held at once."""

    def __init__(self, limit: int = 256) -> None:
        self._fds: dict[str, int] = {}
        self._limit = limit

    def __len__(self) -> int:
        return len(self._fds)

    def read(self, path: str, size: int = 1024) -> bytes | None:
        """The file's first ``size`` bytes now, or None (no such file, or it has gone)."""
        fd = self._fds.get(path)
        if fd is None:
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                return None
            if len(self._fds) >= self._limit:
                self.close()  # a churning set of threads: start over, stay bounded
            self._fds[path] = fd
        try:
            data = os.pread(fd, size, 0)
        except OSError:
            data = b""
        if not data:
            self.drop(path)
            return None
        return data

    def drop(self, path: str) -> None:
        fd = self._fds.pop(path, None)
        if fd is not None:
            os.close(fd)

    def drop_under(self, prefix: str) -> None:
        """Close every file whose path starts with ``prefix`` (a process's, when it goes)."""
        for path in [p for p in self._fds if p.startswith(prefix)]:
            self.drop(path)

    def keep_only(self, paths: set[str], prefix: str) -> None:
        """Close the files under ``prefix`` that are not in ``paths``."""
        for path in [p for p in self._fds if p.startswith(prefix) and p not in paths]:
            self.drop(path)

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: os may be gone already
            pass


def host_cpu(data: bytes) -> tuple[float, float, float | None] | None:
    """(total, idle + iowait, steal) CPU seconds from /proc/stat's first line, as psutil
    reads them (guest time is inside user and nice already: not counted twice)."""
    line = data.split(b"\n", 1)[0].split()
    if not line or line[0] != b"cpu" or len(line) < 5:
        return None
    try:
        ticks = [int(v) for v in line[1:]]
    except ValueError:
        return None
    total = sum(ticks) - sum(ticks[8:10])
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
    steal = ticks[7] / CLOCK_TICKS if len(ticks) > 7 else None
    return total / CLOCK_TICKS, idle / CLOCK_TICKS, steal


def process_stat(data: bytes) -> tuple[str, float] | None:
    """(comm, user + system CPU seconds) from /proc/PID/stat."""
    head, sep, rest = data.rpartition(b")")
    if not sep:
        return None
    fields = rest.split()
    try:
        cpu = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
    except (IndexError, ValueError):
        return None
    return head.partition(b"(")[2].decode("utf-8", "replace"), cpu
