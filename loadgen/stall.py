"""A stall probe: a thread of short sleeps that notes when the machine froze.

Some hosts (VMs under a busy hypervisor) freeze every process for 0.1 s to
seconds at a time; a step measured across a freeze reports the freeze, not
the server. The sweep marks such steps and measures them again.
"""

from __future__ import annotations

import threading
import time


class StallProbe:
    def __init__(self, period_s: float = 0.005, threshold_s: float = 0.05) -> None:
        self.period_s = period_s
        self.threshold_s = threshold_s
        self._stalls: list[tuple[float, float]] = []  # (monotonic start, seconds lost)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # To answer in wall-clock time for logs stamped with time.time() (a server's).
        self._wall_minus_mono = time.time() - time.monotonic()

    def _run(self) -> None:
        while not self._stop.is_set():
            t0 = time.monotonic()
            time.sleep(self.period_s)
            lost = time.monotonic() - t0 - self.period_s
            if lost > self.threshold_s:
                with self._lock:
                    self._stalls.append((t0, lost))
                    del self._stalls[:-10000]

    def start(self) -> None:
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(
                target=self._run, name="headroom-stall-probe", daemon=True
            )
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
            self._thread = None

    def __enter__(self) -> StallProbe:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def count(self, start: float, end: float) -> int:
        """How many stalls overlapped [start, end] (monotonic)."""
        return self.stalls(start, end)[0]

    def worst(self) -> float:
        """The longest stall seen, in seconds (0 when none)."""
        with self._lock:
            return max((gap for _, gap in self._stalls), default=0.0)

    def recorded(self) -> list[tuple[float, float]]:
        """Every stall so far: (monotonic start, seconds lost)."""
        with self._lock:
            return list(self._stalls)

    def stalls_wall(self, start: float, end: float) -> tuple[int, float]:
        """`stalls` for an interval of wall-clock (time.time()) times."""
        return self.stalls(start - self._wall_minus_mono, end - self._wall_minus_mono)

    def stalls(self, start: float, end: float) -> tuple[int, float]:
        """How many stalls overlapped [start, end] (monotonic) and the seconds they took inside it."""
        n, lost = 0, 0.0
        with self._lock:
            for t0, gap in self._stalls:
                a, b = max(start, t0), min(end, t0 + gap + self.period_s)
                if b > a:
                    n += 1
                    lost += min(gap, b - a)
        return n, lost
