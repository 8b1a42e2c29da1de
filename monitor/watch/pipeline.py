"""The watch pipeline: sampler -> window -> diagnosis -> report, shared by every face.

`snapshot`, the agent, the TUI and the sweep all hold one Monitor; each new
snapshot enters the live window (monitor.window.live: O(1) a tick, whatever the
window's length). Verdicts are judged once a step (every snapshot, or every
``diagnose_every_s``): a step is what a cause's hold counts (hysteresis) and what
listeners hear, taken on the newest reading once those being made are made (a
digest of five ticks is judged on its last). A reader between steps gets the latest
reading judged for it (a look that counts towards nothing), so what it reads is
never older than the last reading however long the step; nobody reading, nothing
is judged between steps.
The report is built when a reader first asks for it; readers take the latest (an
immutable, JSON-able dict) without touching any source. A sampler that makes its
snapshots a few ticks at a time (the agent's: Sampler.digest_every_s) makes those
waiting before a reader reads.
"""

from __future__ import annotations

import dataclasses
import math
import threading
from collections.abc import Callable
from typing import Any

from monitor.diagnosis import Diagnoser, Diagnosis
from monitor.read.sampler import Sampler
from monitor.sources.samples import Snapshot
from monitor.watch.report import build_report
from monitor.window.live import LiveWindow
from monitor.window.stats import WindowStats


class Monitor:
    def __init__(
        self,
        sampler: Sampler,
        diagnoser: Diagnoser | None = None,
        window_s: float = 10.0,
        notes: tuple[str, ...] = (),
        max_window_s: float | None = None,
        diagnose_every_s: float = 0.0,
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
        # Held while the live window moves or is judged (sampler's thread, or a reader's).
        # Re-entrant: a listener may ask for a fresh diagnosis (refresh()).
        self._judging = threading.RLock()
        self._judged: Snapshot | None = None  # the reading the latest verdicts are for
        self._step_due = False
        self._due_at = 0.0  # the reading that made the waiting step due
        self._diagnosis: Diagnosis | None = None
        self._report: dict[str, Any] | None = None
        self._window: WindowStats | None = None
        # Verdicts hold over consecutive steps: at 100 ms ticks, judging each tick would
        # cost more than the readings and judge nothing new (0: every snapshot).
        self.diagnose_every_s = diagnose_every_s
        self._live = LiveWindow(
            window_s,
            capacity=getattr(sampler, "capacity", None),
            reach=getattr(sampler, "reach", None),
        )
        self._live_since: float | None = None
        self._last_step: float | None = None
        self._cpu_profile: Any = None  # monitor.profiling.stacks.CpuProfile
        # Called with each step's diagnosis and its window (the auto-profiler listens here),
        # in order, holding the window: a listener must not wait on the sampler.
        self.listeners: list[Callable[[Diagnosis, WindowStats], None]] = []
        sampler.subscribe(self._on_snapshot)
        sampler.on_caught_up(self._take_step)

    @property
    def gpu_hour_price(self) -> float | None:
        """The price per GPU-hour the report and the exporter quote (the diagnoser's)."""
        return self.diagnoser.gpu_hour_price

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
        """Diagnose the latest window again (a profile just arrived): a step."""
        self.sampler.flush()
        with self._judging:
            # The window's own newest reading: judging it never re-reads the ring, which
            # would wait on the sampler's digest while holding the window.
            snap = self._live.latest
            if snap is None or self._restart_asked:
                return
            self._step_due = True
        self._take_step()

    def _with_profile(self, window: WindowStats) -> WindowStats:
        prof = self.cpu_profile()
        if prof is None:
            return window
        if window.host is not None and window.host.pids and prof.pid not in window.host.pids:
            return window  # that process has gone: its profile says nothing of the new one
        return dataclasses.replace(window, cpu_profile=prof)

    def _live_window(self, snap: Snapshot) -> WindowStats:
        self._advance(snap)
        return self._live.stats()

    def _advance(self, snap: Snapshot) -> None:
        """Take ``snap`` into the live window (its stats are built only when asked for)."""
        live = self._live
        if live.latest is snap:
            pass  # refresh(): the same reading, diagnosed again
        elif (
            live.latest is None
            or live.seconds != self.window_s
            or self._live_since != self._since
            or snap.t <= live.latest.t
        ):
            # The window's length or start changed (or readings came out of order): take
            # the ring afresh, as Sampler.window would.
            since = self._since
            snaps = [s for s in self.sampler.snapshots() if since is None or s.t >= since]
            if not snaps or snaps[-1] is not snap:
                snaps.append(snap)
            live.rebuild(snaps, seconds=self.window_s)
            self._live_since = since
        else:
            live.push(snap)

    def _due(self, snap: Snapshot) -> bool:
        if self.diagnose_every_s <= 0 or self._last_step is None:
            return True
        # Ticks jitter: a step falls due a little early rather than a whole tick late.
        return snap.t - self._last_step >= 0.95 * self.diagnose_every_s

    def _on_snapshot(self, snap: Snapshot) -> None:
        with self._judging:
            if self._restart_asked:
                self._restart_asked = False
                self._since = snap.t
                self._last_step = None
                self._step_due = False  # what was watched before is not judged
            elif self._step_due and snap.t - self._due_at >= 0.95 * self.diagnose_every_s:
                # The step waiting on the last reading is a whole step old: taken on it, so
                # a digest of several steps' readings is judged at each step.
                self._take_step()
            self._advance(snap)
            if not self._step_due and self._due(snap):
                # Taken once the readings being made are made (Sampler.on_caught_up), on the
                # newest: a digest of five ticks judges its last, which a reader then reads.
                self._step_due, self._due_at = True, snap.t

    def _take_step(self) -> None:
        with self._judging:
            snap = self._live.latest
            if not self._step_due or snap is None:
                return
            self._step_due = False
            self._last_step = snap.t
            diagnosis, window = self._judge(snap, step=True)
            self._widen_for(diagnosis, window)
            # In order, one step at a time: heard under the lock a reader's look waits on.
            for listener in self.listeners:
                listener(diagnosis, window)

    def _judge(self, snap: Snapshot, step: bool) -> tuple[Diagnosis, WindowStats]:
        window = self._with_profile(self._live_window(snap))
        diagnoser = self.diagnoser
        diagnosis = diagnoser.update(window) if step else diagnoser.peek(window)
        with self._lock:
            self._judged = snap
            self._window = window
            self._diagnosis = diagnosis
            self._report = None  # built when a reader asks (report())
        return diagnosis, window

    def _read(self) -> None:
        """Bring the verdicts up to the latest reading for a reader (between steps: judged
        for this reader and those after it, until the next reading; no hold counted)."""
        latest = self.sampler.latest()  # makes the readings waiting (digest_every_s)
        if latest is None or latest is self._judged:
            return
        with self._judging:
            # A reading the window has not taken yet (its listener runs in another thread)
            # is judged in its own turn; a restart waits for the next reading.
            if latest is self._judged or latest is not self._live.latest or self._restart_asked:
                return
            if self._step_due:
                self._take_step()  # due anyway: the reader reads the step
            else:
                self._judge(latest, step=False)

    def _build_report(self, window: WindowStats, diagnosis: Diagnosis) -> dict[str, Any]:
        report = build_report(
            window,
            diagnosis.verdicts,
            diagnosis.analyses,
            self.notes,
            gpu_hour_price=self.gpu_hour_price,
        )
        if self.max_window_s is not None:
            # Faces say "widening" rather than "widen --window" when the window does it itself.
            report["window_widens_to_s"] = self.max_window_s
        return report

    def _widen_for(self, diagnosis: Diagnosis, window: WindowStats) -> None:
        if self.max_window_s is None:
            return
        if any(a.get("littles_unjudged") == "none-finished" for a in diagnosis.analyses.values()):
            # No request finished: they last longer than the window holds, by how much is not
            # known yet. Twice what it holds, until one finishes and says how long they last.
            wanted = min(self.max_window_s, float(math.ceil(2 * window.duration_s)))
            self.window_s = max(self.window_s, wanted)
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
        self._read()
        with self._lock:
            report, window, diagnosis = self._report, self._window, self._diagnosis
        if report is not None or window is None or diagnosis is None:
            return report
        report = self._build_report(window, diagnosis)
        with self._lock:
            if self._diagnosis is diagnosis:
                if self._report is not None:
                    return self._report  # another reader built it first: one report a step
                self._report = report
        return report

    def diagnosis(self) -> Diagnosis | None:
        self._read()
        with self._lock:
            return self._diagnosis

    def window(self) -> WindowStats | None:
        self._read()
        with self._lock:
            return self._window
