"""Profiles in the background: by themselves while cpu-bound holds (at most once per process
every ``every_s``), or on demand; never two at once.

A steadily CPU-bound box would otherwise pay for py-spy all the time: one profile a
process every 5 minutes (the default) costs ~1% of a core for 10 s in 300.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from monitor.profiling import pyspy
from monitor.profiling.stacks import CpuProfile

log = logging.getLogger(__name__)

DEFAULT_EVERY_S = 300.0
# Samples a second for profiles taken by themselves or on demand: 10 s at 20/s is 200
# samples, and py-spy on one vLLM process costs ~1.5% of a core at 20/s against ~2.7% at
# 50/s (bench/results/profile_cost_hot_process*.txt). snapshot --profile keeps 50/s: its
# windows are short, and it runs once, when asked.
AUTO_RATE = 20
MAX_SECONDS = 60.0


class ProfileBusy(pyspy.ProfileError):
    """Another profile is running."""


class Profiler:
    """Takes py-spy profiles of the engine's hot thread for a Monitor, one at a time."""

    def __init__(
        self,
        monitor: Any,
        seconds: float,
        every_s: float = DEFAULT_EVERY_S,
        rate: int = AUTO_RATE,
        auto: bool = True,
        clock: Callable[[], float] = time.monotonic,
        take: Callable[..., CpuProfile] = pyspy.profile,
    ) -> None:
        self.monitor = monitor
        self.seconds = min(MAX_SECONDS, max(1.0, seconds))
        self.every_s = every_s
        self.rate = rate
        self.auto = auto
        self._clock = clock
        self._take = take
        self._lock = threading.Lock()
        self._running = False
        self._last_try: dict[int, float] = {}  # pid -> clock of the last automatic attempt
        self.last_error: str | None = None
        self.taken = 0
        if auto:
            monitor.listeners.append(self._on_diagnosis)

    @property
    def running(self) -> bool:
        with self._lock:
            return self._running

    def _target(self, window: Any) -> tuple[int, int | None, str] | None:
        host = window.host if window is not None else None
        if host is None:
            return None
        if host.busiest_thread is not None:
            t = host.busiest_thread
            return t.pid, t.tid, t.name
        return (host.pids[0], None, "") if host.pids else None

    def _on_diagnosis(self, diagnosis: Any, window: Any) -> None:
        if not any(v.cause == "cpu-bound" for v in diagnosis.verdicts):
            return
        target = self._target(window)
        if target is None:
            return
        pid, tid, name = target
        now = self._clock()
        with self._lock:
            if self._running or now - self._last_try.get(pid, -float("inf")) < self.every_s:
                return
            self._last_try[pid] = now
            self._running = True
        threading.Thread(
            target=self._run,
            args=(pid, tid, name, self.seconds),
            name="headroom-profile",
            daemon=True,
        ).start()

    def _run(self, pid: int, tid: int | None, name: str, seconds: float) -> None:
        try:
            self._profile(pid, tid, name, seconds)
        except pyspy.ProfileError as exc:
            if str(exc) != self.last_error:
                log.warning("profile of process %s refused: %s", pid, exc)
            self.last_error = str(exc)
        except Exception:  # a bug here must not take the sampler down
            log.exception("profile of process %s failed", pid)
        finally:
            with self._lock:
                self._running = False

    def _profile(self, pid: int, tid: int | None, name: str, seconds: float) -> CpuProfile:
        # Only the process with the hot thread: its siblings' threads are not the question.
        prof = self._take(
            pid, seconds, self.rate, want_tid=tid, subprocesses=False, thread_name=name
        )
        self.last_error = None
        self.taken += 1
        top = prof.functions[0] if prof.functions else None
        log.info(
            "profiled process %s thread %s for %g s: %s",
            pid,
            prof.thread or prof.tid,
            seconds,
            f"{100 * top.self_share:.0f}% in {top.function} ({top.where()})"
            if top
            else "no samples",
        )
        self.monitor.set_cpu_profile(prof)
        self.monitor.refresh()
        return prof

    def profile_now(self, seconds: float | None = None) -> CpuProfile:
        """On demand (the TUI's p, the agent's POST): blocks for the profile; ProfileError if refused."""
        s = self.seconds if seconds is None else seconds
        if not 0 < s <= MAX_SECONDS:
            raise pyspy.ProfileError(f"seconds must be in (0, {MAX_SECONDS:g}]")
        target = self._target(self.monitor.window())
        if target is None:
            raise pyspy.ProfileError(
                "no engine process to profile: headroom finds it from a local --vllm URL, or "
                "give --pid"
            )
        with self._lock:
            if self._running:
                raise ProfileBusy("a profile is already running: try again in a few seconds")
            self._running = True
            self._last_try[target[0]] = self._clock()
        try:
            return self._profile(target[0], target[1], target[2], s)
        finally:
            with self._lock:
                self._running = False
