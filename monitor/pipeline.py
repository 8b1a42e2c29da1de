"""The watch pipeline: sampler -> window -> diagnosis -> report, shared by every face.

`snapshot`, the agent, the TUI and the sweep all hold one Monitor; each new
snapshot recomputes the window and the verdicts once, and readers take the
latest report (an immutable, JSON-able dict) without touching any source.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import Any

from monitor.diagnosis import Diagnoser, Diagnosis
from monitor.report import build_report
from monitor.sampler import Sampler
from monitor.samples import Snapshot
from monitor.window import WindowStats


class Monitor:
    def __init__(
        self,
        sampler: Sampler,
        diagnoser: Diagnoser | None = None,
        window_s: float = 10.0,
        notes: tuple[str, ...] = (),
    ) -> None:
        self.sampler = sampler
        self.diagnoser = diagnoser if diagnoser is not None else Diagnoser()
        self.window_s = window_s
        self.notes = notes
        self._lock = threading.Lock()
        self._diagnosis: Diagnosis | None = None
        self._report: dict[str, Any] | None = None
        self._window: WindowStats | None = None
        self._cpu_profile: Any = None  # monitor.profiling.stacks.CpuProfile
        # Called with each new diagnosis and its window (the auto-profiler listens here).
        self.listeners: list[Callable[[Diagnosis, WindowStats], None]] = []
        sampler.subscribe(self._on_snapshot)

    def set_cpu_profile(self, profile: Any) -> None:
        """The engine thread's latest profile: shown with every window while its process lives."""
        with self._lock:
            self._cpu_profile = profile

    def cpu_profile(self) -> Any:
        with self._lock:
            return self._cpu_profile

    def refresh(self) -> None:
        """Diagnose the latest window again (a profile just arrived)."""
        snap = self.sampler.latest()
        if snap is not None:
            self._on_snapshot(snap)

    def _with_profile(self, window: WindowStats) -> WindowStats:
        prof = self.cpu_profile()
        if prof is None:
            return window
        if window.host is not None and window.host.pids and prof.pid not in window.host.pids:
            return window  # that process has gone: its profile says nothing of the new one
        return dataclasses.replace(window, cpu_profile=prof)

    def _on_snapshot(self, snap: Snapshot) -> None:
        window = self._with_profile(self.sampler.window(self.window_s))
        diagnosis = self.diagnoser.update(window)
        report = build_report(window, diagnosis.verdicts, diagnosis.analyses, self.notes)
        with self._lock:
            self._window = window
            self._diagnosis = diagnosis
            self._report = report
        for listener in self.listeners:
            listener(diagnosis, window)

    def report(self) -> dict[str, Any] | None:
        with self._lock:
            return self._report

    def diagnosis(self) -> Diagnosis | None:
        with self._lock:
            return self._diagnosis

    def window(self) -> WindowStats | None:
        with self._lock:
            return self._window
