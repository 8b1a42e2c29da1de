"""The simulated GPU's activity over time, reduced per sampling period as DCGM reduces it.

Each engine step leaves one interval: when its GPU phase ran and the integrals of
"any kernel running", SM-active share, occupancy, tensor-pipe and DRAM activity
over it. A reading over the last period sums the parts of intervals inside it,
assuming activity is spread evenly over each interval.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from simulator.hardware import GpuCost


@dataclass(frozen=True, slots=True)
class Interval:
    start: float
    end: float
    busy_s: float
    sm_active_s: float
    occupancy_s: float
    tensor_s: float
    dram_s: float
    nvlink_bytes: float = 0.0


@dataclass(frozen=True, slots=True)
class Activity:
    """Ratios 0-1 over one sampling period."""

    period_s: float
    util: float
    sm_active: float
    sm_occupancy: float
    tensor_active: float
    dram_active: float
    nvlink_bytes_per_s: float = 0.0  # sent per GPU (as much received): 0 without tensor parallelism


class GpuTimeline:
    def __init__(self, origin: float, keep_s: float = 30.0) -> None:
        self.origin = origin
        self.keep_s = keep_s
        self._intervals: deque[Interval] = deque()

    def add(self, start: float, cost: GpuCost) -> None:
        end = start + cost.phase_s
        self._intervals.append(
            Interval(
                start,
                end,
                cost.busy_s,
                cost.sm_active_s,
                cost.occupancy_s,
                cost.tensor_s,
                cost.dram_s,
                cost.nvlink_bytes,
            )
        )
        horizon = end - self.keep_s
        while self._intervals and self._intervals[0].end < horizon:
            self._intervals.popleft()

    def activity(self, now: float, period_s: float) -> Activity:
        lo = max(now - period_s, self.origin)
        span = now - lo
        if span <= 0:
            return Activity(period_s, 0.0, 0.0, 0.0, 0.0, 0.0)
        busy = sm = occ = tensor = dram = link = 0.0
        for iv in reversed(self._intervals):
            if iv.end <= lo:
                break
            if iv.start >= now:
                continue
            length = iv.end - iv.start
            share = 1.0 if length <= 0 else (min(iv.end, now) - max(iv.start, lo)) / length
            busy += iv.busy_s * share
            sm += iv.sm_active_s * share
            occ += iv.occupancy_s * share
            tensor += iv.tensor_s * share
            dram += iv.dram_s * share
            link += iv.nvlink_bytes * share

        def ratio(x: float) -> float:
            return min(1.0, max(0.0, x / span))

        return Activity(
            span, ratio(busy), ratio(sm), ratio(occ), ratio(tensor), ratio(dram), link / span
        )
