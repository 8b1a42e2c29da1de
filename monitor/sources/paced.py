"""A source read at most every so often, for ticks faster than its data change.

At 100 ms ticks an engine's /metrics page costs more to fetch and parse (1-2 ms) than
NVML and GPM together, and its counters and histograms become rates over the window
either way: reading it once a second loses nothing the window shows. Between reads
the source adds no samples (its readings keep their own times, so rates stay exact)
and repeats its last errors, so a failing endpoint stays failing on every tick.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from monitor.sources.base import Reading, Source


class Paced:
    def __init__(
        self,
        source: Source,
        every_s: float,
        slack_s: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.source = source
        self.name = source.name
        self.every_s = every_s
        # Ticks jitter: a read falls due this much early rather than a whole tick late.
        self.slack_s = slack_s
        self._clock = clock
        self._next = -float("inf")
        self._last = Reading()

    def __getattr__(self, attr: str) -> object:
        return getattr(self.source, attr)  # url, target, notes: the wrapped source's

    def due(self) -> bool:
        return self._clock() >= self._next

    def read(self) -> Reading:
        now = self._clock()
        if now < self._next:
            return Reading(errors=self._last.errors)
        self._next = now + self.every_s - self.slack_s
        self._last = self.source.read()
        return self._last

    def read_later(self) -> Callable[[], Reading]:
        """read(), the wrapped source's reading made later where it can be (the sampler's
        digest_every_s); between reads, the errors of the read before, as made by then."""
        now = self._clock()
        if now < self._next:
            return lambda: Reading(errors=self._last.errors)
        self._next = now + self.every_s - self.slack_s
        later = getattr(self.source, "read_later", None)
        if later is None:
            self._last = self.source.read()
            reading = self._last
            return lambda: reading
        finish = later()

        def made() -> Reading:
            self._last = finish()
            return self._last

        return made

    def close(self) -> None:
        self.source.close()
