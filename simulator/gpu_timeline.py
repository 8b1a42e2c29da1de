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


# How the simulated board's power follows its activity: idle watts plus this share of the
# span to its TDP (any kernel, tensor pipes and DRAM weigh in; the weights sum to 1).
LOAD_WEIGHTS = (0.3, 0.4, 0.3)  # util, tensor_active, dram_active


def power_load(util: float, tensor: float, dram: float) -> float:
    wu, wt, wd = LOAD_WEIGHTS
    return min(1.0, wu * util + wt * tensor + wd * dram)


class GpuTimeline:
    def __init__(self, origin: float, keep_s: float = 30.0) -> None:
        self.origin = origin
        self.keep_s = keep_s
        self._intervals: deque[Interval] = deque()
        # The load integrated over every interval added (seconds at full load): with the
        # idle floor, the board's energy since the simulator started (energy_j).
        self._load_s = 0.0

    def energy_j(self, now: float, idle_w: float, tdp_w: float) -> float:
        """Joules the board drew from the start to ``now``: a counter, like the driver's."""
        load_s = self._load_s
        for iv in reversed(self._intervals):  # what of the newest steps lies after now
            if iv.end <= now:
                break
            length = iv.end - iv.start
            after = 1.0 if length <= 0 or iv.start >= now else (iv.end - now) / length
            load_s -= after * _load_s(iv)
        return idle_w * max(0.0, now - self.origin) + (tdp_w - idle_w) * max(0.0, load_s)

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
        self._load_s += _load_s(self._intervals[-1])
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


def _load_s(iv: Interval) -> float:
    wu, wt, wd = LOAD_WEIGHTS
    return wu * iv.busy_s + wt * iv.tensor_s + wd * iv.dram_s
