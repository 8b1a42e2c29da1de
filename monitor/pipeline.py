"""The watch pipeline: sampler -> window -> diagnosis -> report, shared by every face.

`snapshot`, the agent, the TUI and the sweep all hold one Monitor; each new
snapshot recomputes the window and the verdicts once, and readers take the
latest report (an immutable, JSON-able dict) without touching any source.
"""

from __future__ import annotations

import dataclasses
import math
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
        max_window_s: float | None = None,
    ) -> None:
        self.sampler = sampler
        self.diagnoser = diagnoser if diagnoser is not None else Diagnoser()
        self.window_s = window_s
        self.notes = notes
        # With a ceiling, the window widens by itself when requests outlast it (Little's
        # law cannot be judged over a window shorter than a request), up to the ceiling.
        self.max_window_s = max_window_s
        self._since: float | None = None
        self._restart_asked = False
        self._lock = threading.Lock()
        self._diagnosis: Diagnosis | None = None
        self._report: dict[str, Any] | None = None
        self._window: WindowStats | None = None
        self._cpu_profile: Any = None  # monitor.profiling.stacks.CpuProfile
        # Called with each new diagnosis and its window (the auto-profiler listens here).
        self.listeners: list[Callable[[Diagnosis, WindowStats], None]] = []
        sampler.subscribe(self._on_snapshot)

    def restart(self, window_s: float | None = None) -> None:
        """What is watched changed (the demo switched scenario): windows start afresh from the
        next reading, verdicts and remembered caps are forgotten, and the window goes back to
        ``window_s``. Safe to call from another thread."""
        if window_s is not None:
            self.window_s = window_s
        self.diagnoser.reset()
        self._restart_asked = True

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
        if self._restart_asked:
            self._restart_asked = False
            self._since = snap.t
        window = self._with_profile(self.sampler.window(self.window_s, since=self._since))
        diagnosis = self.diagnoser.update(window)
        report = build_report(window, diagnosis.verdicts, diagnosis.analyses, self.notes)
        if self.max_window_s is not None:
            # Faces say "widening" rather than "widen --window" when the window does it itself.
            report["window_widens_to_s"] = self.max_window_s
        self._widen_for(diagnosis)
        with self._lock:
            self._window = window
            self._diagnosis = diagnosis
            self._report = report
        for listener in self.listeners:
            listener(diagnosis, window)

    def _widen_for(self, diagnosis: Diagnosis) -> None:
        if self.max_window_s is None:
            return
        longest = max(
            (
                a.get("littles_latency_s") or 0.0
                for a in diagnosis.analyses.values()
                if a.get("littles_unjudged") == "short-window"
            ),
            default=0.0,
        )
        if longest > 0:
            # Twice a request's life, in whole seconds: one window then holds whole requests.
            wanted = min(self.max_window_s, float(math.ceil(2 * longest)))
            self.window_s = max(self.window_s, wanted)

    def report(self) -> dict[str, Any] | None:
        with self._lock:
            return self._report

    def diagnosis(self) -> Diagnosis | None:
        with self._lock:
            return self._diagnosis

    def window(self) -> WindowStats | None:
        with self._lock:
            return self._window
