"""Diagnoser: diagnose() over successive windows, with hysteresis so verdicts do not flap.

A cause (per scope) becomes *stable* once it has held for ``enter_windows``
consecutive windows, and clears only after ``clear_windows`` consecutive
windows without it; while it is held over, its last evidence is shown.
``since`` is the wall time (``window.wall_end``) of the first window of the run
in which it held.

Before anything is stable (the first windows of a run, or a
``snapshot --window 2``), the raw verdicts are reported as they are, with
confidence scaled by ``pending_confidence_factor``: the very first window
always names a cause. Once a cause is stable it leads; newer causes still
pending follow it, scaled the same way, until they are stable themselves.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from monitor.diagnosis.diagnose import Diagnosis, defer_to_lead, diagnose, order
from monitor.diagnosis.figures import SeenCap
from monitor.diagnosis.step_cost import StepMemory, point_from_window
from monitor.diagnosis.thresholds import Caps, Thresholds
from monitor.diagnosis.verdict import Verdict
from monitor.window.scopes import engine_scope
from monitor.window.stats import WindowStats


@dataclass
class _Track:
    since: float
    last: Verdict
    held: int = 0  # consecutive windows it held
    absent: int = 0  # consecutive windows it did not
    stable: bool = False


class Diagnoser:
    def __init__(
        self,
        thresholds: Thresholds | None = None,
        caps: Caps | None = None,
        gpu_hour_price: float | None = None,
    ) -> None:
        self.thresholds = thresholds if thresholds is not None else Thresholds()
        self.caps = caps if caps is not None else Caps()
        # The price per GPU-hour the verdicts and the report quote (None: energy alone).
        self.gpu_hour_price = gpu_hour_price
        self._tracks: dict[tuple[str, str], _Track] = {}
        # Sequence caps inferred from a plateau, by engine scope: a plateau shows only while
        # requests queue, and the cap is still the cap once the load eases.
        self._seen_caps: dict[str, SeenCap] = {}
        # Each engine's (tokens a step, time a step) over the windows judged, for a line of
        # what a step costs where no GPU activity says it (step_cost.py).
        self._steps = StepMemory()

        # When each cause a peek saw was first seen, while peeks keep seeing it: a cause seen
        # between steps is dated from its first sight, not from the step that counts it.
        self._peeked: dict[tuple[str, str], float] = {}
        self._reset_asked = False

    def reset(self) -> None:
        """Forget every verdict and cap, before the next update (safe from another thread)."""
        self._reset_asked = True

    def update(self, window: WindowStats) -> Diagnosis:
        """Judge ``window``, the next in the run: the verdicts held over the windows before."""
        if self._reset_asked:
            self._reset_asked = False
            self._tracks.clear()
            self._seen_caps.clear()
            self._steps.clear()
            self._peeked.clear()
        diagnosis = self._judge(window, self._tracks, self._seen_caps)
        self._peeked = {}
        # After judging: a window's own point must not vouch for the line it is judged by.
        for e in window.engines:
            p = point_from_window(e, window.wall_end)
            if p is not None:
                self._steps.add(engine_scope(e), p)
        return diagnosis

    def peek(self, window: WindowStats) -> Diagnosis:
        """What ``update(window)`` would say, remembering nothing of it: a reader's look at
        the latest window between steps must not count towards a cause's hold."""
        if self._reset_asked:
            tracks: dict[tuple[str, str], _Track] = {}
            diagnosis = self._judge(window, tracks, {})
        else:
            tracks = {key: dataclasses.replace(t) for key, t in self._tracks.items()}
            diagnosis = self._judge(window, tracks, dict(self._seen_caps))
        self._peeked = {key: t.since for key, t in tracks.items() if not t.absent}
        return diagnosis

    def _judge(
        self,
        window: WindowStats,
        tracks: dict[tuple[str, str], _Track],
        seen_caps: dict[str, SeenCap],
    ) -> Diagnosis:
        th = self.thresholds
        raw = diagnose(
            window,
            th,
            self.caps,
            seen_caps,
            reconcile=False,
            gpu_hour_price=self.gpu_hour_price,
            step_costs=self._steps.costs(window.wall_end),
        )
        for scope, a in raw.analyses.items():
            if a.get("seq_cap_origin") == "inferred" and a.get("seq_cap") is not None:
                seen_caps[scope] = SeenCap(int(a["seq_cap"]), window.wall_end)
        now = {(v.cause, v.scope): v for v in raw.verdicts}
        for key, v in now.items():
            track = tracks.get(key)
            if track is None:
                since = self._peeked.get(key, window.wall_end)
                track = tracks[key] = _Track(since=since, last=v)
            track.held += 1
            track.absent = 0
            track.last = v
            if track.held >= th.enter_windows:
                track.stable = True
        for key in [k for k in tracks if k not in now]:
            track = tracks[key]
            track.absent += 1
            track.held = 0
            # A pending cause that lapses starts over; a stable one waits out clear_windows.
            if not track.stable or track.absent >= th.clear_windows:
                del tracks[key]
        stable: list[Verdict] = []
        pending: list[Verdict] = []
        for track in tracks.values():
            v = dataclasses.replace(track.last, since=track.since)
            if track.stable:
                if track.absent:
                    v = dataclasses.replace(
                        v,
                        summary=f"{v.summary} (held: not seen in the last {track.absent} window"
                        f"{'s' if track.absent > 1 else ''})",
                    )
                stable.append(v)
            else:
                pending.append(v)
        # Order on the rule's own confidence, then scale: scaling first would push every
        # pending verdict under weak_confidence and lose the primary-cause order.
        # A weak verdict (a hint, such as CPU in the path without GPU data) never leads a
        # strong one, stable or not: a strong cause that missed one window must not be
        # pushed under a hint that happened to hold a window longer.
        weak = th.weak_confidence
        ordered_stable = order(stable, th)
        ordered_pending = order(pending, th)

        def scale(v: Verdict) -> Verdict:
            return dataclasses.replace(
                v, confidence=round(v.confidence * th.pending_confidence_factor, 3)
            )

        verdicts = (
            [v for v in ordered_stable if v.confidence >= weak]
            + [scale(v) for v in ordered_pending if v.confidence >= weak]
            + [v for v in ordered_stable if v.confidence < weak]
            + [scale(v) for v in ordered_pending if v.confidence < weak]
        )
        return Diagnosis(defer_to_lead(verdicts), raw.analyses)
