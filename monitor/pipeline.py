"""The watch pipeline: sampler -> window -> diagnosis -> report, shared by every face.

`snapshot`, the agent, the TUI and the sweep all hold one Monitor; each new
snapshot recomputes the window and the verdicts once, and readers take the
latest report (an immutable, JSON-able dict) without touching any source.
"""

from __future__ import annotations

import threading
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
        sampler.subscribe(self._on_snapshot)

    def _on_snapshot(self, snap: Snapshot) -> None:
        window = self.sampler.window(self.window_s)
        diagnosis = self.diagnoser.update(window)
        report = build_report(window, diagnosis.verdicts, diagnosis.analyses, self.notes)
        with self._lock:
            self._window = window
            self._diagnosis = diagnosis
            self._report = report

    def report(self) -> dict[str, Any] | None:
        with self._lock:
            return self._report

    def diagnosis(self) -> Diagnosis | None:
        with self._lock:
            return self._diagnosis

    def window(self) -> WindowStats | None:
        with self._lock:
            return self._window
