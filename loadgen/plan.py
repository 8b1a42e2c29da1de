"""Which load to try next: a fixed list, or adaptive (double until saturation, then bisect)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from loadgen.analysis import QUEUE_MIN, find_saturation, load_of
from loadgen.schema import Saturation, StepResult


class FixedPlan:
    def __init__(self, loads: Sequence[float]) -> None:
        self.loads = list(loads)

    def next(self, steps: Sequence[StepResult]) -> float | None:
        done = {load_of(s) for s in steps}
        for x in self.loads:
            if float(x) not in done:
                return x
        return None


@dataclass
class AdaptivePlan:
    """Doubles from ``start`` until the analysis finds the knee, then bisects between the
    knee and the first step past it ``refine`` times (integers for concurrency); then, if
    nothing was measured as far as twice the saturation point, ends with one step there,
    so the plateau (flat throughput, rising latency) is measured and not only inferred."""

    start: float
    maximum: float
    refine: int = 2
    integer: bool = True
    gain_threshold: float = 0.10
    error_threshold: float = 0.10

    def next(self, steps: Sequence[StepResult]) -> float | None:
        if not steps:
            return self.start
        sat = find_saturation(steps, self.gain_threshold, self.error_threshold)
        ordered = sorted(load_of(s) for s in steps)
        if not sat.reached:
            x = ordered[-1] * 2
            return x if x <= self.maximum else None
        if sat.cause == "errors" or sat.step_index is None:
            return None
        at = next(load_of(s) for s in steps if s.index == sat.step_index)
        further = self._past_a_soft_knee(steps, at, ordered)
        if further is not None:
            return further
        step = self._refine(steps, sat, at, ordered)
        return step if step is not None else self._confirm(at, ordered)

    def _past_a_soft_knee(
        self, steps: Sequence[StepResult], at: float, ordered: list[float]
    ) -> float | None:
        """One more doubling where a knee rests on one flat doubling and nothing queued.

        Requests waiting at the engine past the knee prove a limit there (a cap holds them
        back). Without a queue the knee is only a doubling that gained little, and a flat
        step is not always the plateau: llama.cpp with 32 slots on the H200 gained 8% from 8
        streams to 16, then 32 did 1.9x of 16 (tests/gpu/test_h200_llamacpp_replay.py). The
        analysis leaves such a step out once a load twice as heavy climbs out of it; this
        measures that load, two doublings past the knee, before bisecting below it."""
        top = ordered[-1]
        if top >= 4 * at:
            return None
        past = [s for s in steps if load_of(s) >= at]
        if any(s.waiting_mean is None or s.waiting_mean >= QUEUE_MIN for s in past):
            return None  # a queue at the engine (or no engine figures to tell)
        x = top * 2
        return x if x <= self.maximum else None

    def _refine(
        self, steps: Sequence[StepResult], sat: Saturation, at: float, ordered: list[float]
    ) -> float | None:
        if sat.refine_from_step_index is not None:
            # The saturation step already queues: the limit is between it and the step below.
            knee = next(load_of(s) for s in steps if s.index == sat.refine_from_step_index)
            above = [at]
        else:
            knee = at
            above = [x for x in ordered if x > knee]
        if not above or self._refinements(ordered) >= self.refine:
            return None
        mid = (knee + above[0]) / 2
        if self.integer:
            mid = float(int(mid))
            if mid <= knee or mid >= above[0]:
                return None
        elif above[0] - knee < 0.02 * knee:
            return None
        return mid

    def _refinements(self, loads: list[float]) -> int:
        """Steps off the doubling ladder: what the plan has bisected so far.

        Counted from the steps rather than kept, so a sweep continued with --resume
        plans exactly as the one that was interrupted would have."""
        if self.start <= 0:
            return 0
        return sum(1 for x in loads if x <= 0 or not math.log2(x / self.start).is_integer())

    def _confirm(self, at: float, ordered: list[float]) -> float | None:
        x = min(at * 2, self.maximum)
        return x if x > ordered[-1] else None
