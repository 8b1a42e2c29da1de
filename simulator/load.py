"""The built-in background load: closed-loop concurrency or open-loop Poisson arrivals, seeded.

It submits straight to the engine (no HTTP), so it costs the box almost no CPU
and the same code drives the virtual and the real clock: the engine asks it for
the arrivals due by ``now`` before each step and sleeps until ``next_due`` when idle.
"""

from __future__ import annotations

import math
import random

from simulator.config import LoadConfig
from simulator.engine import Request


class BuiltinLoad:
    def __init__(self, cfg: LoadConfig, start: float) -> None:
        self.cfg = cfg
        self._rng = random.Random(cfg.seed)
        self._due: list[Request] = []
        self._next_arrival = math.inf
        if cfg.mode == "closed":
            for _ in range(cfg.concurrency):
                self._due.append(self._make(start))
        elif cfg.mode == "open":
            for _ in range(cfg.initial_requests):
                req = self._make(start)
                # Part-way through: as if the load had run for a while already.
                req.max_tokens = self._rng.randint(1, req.max_tokens)
                self._due.append(req)
            if cfg.rate > 0:
                self._next_arrival = start + self._rng.expovariate(cfg.rate)

    def _draw(self, mean: int, jitter: float) -> int:
        if jitter <= 0:
            return mean
        lo = max(1, math.floor(mean * (1 - jitter)))
        hi = max(lo, math.ceil(mean * (1 + jitter)))
        return self._rng.randint(lo, hi)

    def _make(self, now: float) -> Request:
        cfg = self.cfg
        req = Request(
            prompt_tokens=self._draw(cfg.prompt_tokens, cfg.prompt_jitter),
            max_tokens=self._draw(cfg.output_tokens, cfg.output_jitter),
            arrival=now,
        )
        if cfg.mode == "closed":
            req.on_finish = self._replace
        return req

    def _replace(self, req: Request, now: float) -> None:
        # Closed loop, no think time: a finished user sends its next request at once.
        self._due.append(self._make(now))

    @property
    def next_due(self) -> float:
        """When the next request arrives (inf: only when one finishes, or never)."""
        if self._due:
            return min(r.arrival for r in self._due)
        return self._next_arrival

    def arrivals(self, now: float) -> list[Request]:
        out = [r for r in self._due if r.arrival <= now]
        if out:
            self._due = [r for r in self._due if r.arrival > now]
        while self._next_arrival <= now:
            out.append(self._make(self._next_arrival))
            self._next_arrival += self._rng.expovariate(self.cfg.rate)
        return out
