"""One GPU's energy as a counter fresh on every tick, from a counter read every so often.

NVML's total energy counter (``nvmlDeviceGetTotalEnergyConsumption``, mJ since the driver
loaded) is exact but dear: 3.9 ms of driver CPU a call on an H200, against 0.05 ms for
the power reading every tick already makes. So the counter is read once every
``every_s`` seconds and, between reads, the power readings are integrated over the
ticks from the last read (trapezoids): every tick's figure is the counter's as of its
last read plus the power since. At the next read the counter takes over again; where the
integration ran ahead of it, the figure holds still until the counter catches up, so it
never runs backwards and the error never carries past one read.

Where the counter is missing (older GPUs answer not supported), the figure is the power
integrated over the ticks alone, and says so (``source`` "power" rather than "counter").
Where neither is read (a MIG instance), it is None.

The figure starts at 0 J on the first reading: it counts from when headroom began to
watch, so a counter that restarts (the driver reloaded: its value falls) adds what it
counted since then, as Prometheus's ``rate`` treats a counter reset.
"""

from __future__ import annotations

from typing import Literal

EnergySource = Literal["counter", "power"]


class EnergyMeter:
    """Joules since the first reading of one device; ``update`` once a tick."""

    __slots__ = (
        "every_s", "counter", "total_j", "_due", "_raw_mj", "_anchor_j", "_since_j", "_t", "_p",
    )  # fmt: skip

    def __init__(self, every_s: float, counter: bool = True) -> None:
        self.every_s = every_s
        # Whether the device has a counter worth asking (False: integrate power alone).
        self.counter = counter
        self._due = -float("inf")
        self._raw_mj: float | None = None  # the counter's last reading
        self._anchor_j = 0.0  # the figure as of that reading
        self._since_j = 0.0  # power integrated since it
        self._t: float | None = None
        self._p: float | None = None
        self.total_j: float | None = None

    def due(self, now: float) -> bool:
        """Whether the counter should be read on this tick (every_s 0: never). Asking counts as
        the read, answered or not: a counter that fails is asked again a span later, not at
        every tick (each ask costs what a read does)."""
        if not (self.counter and self.every_s > 0 and now >= self._due):
            return False
        self._due = now + self.every_s
        return True

    @property
    def source(self) -> EnergySource | None:
        if self.total_j is None:
            return None
        return "counter" if self._raw_mj is not None else "power"

    def update(
        self, now: float, power_w: float | None, counter_mj: float | None = None
    ) -> float | None:
        """This tick's figure (J since the first reading), from its power reading and, where
        read this tick, the counter (mJ)."""
        if self._t is not None and (power_w is not None or self._p is not None):
            # A missing power reading holds the other end of the trapezoid.
            a = self._p if self._p is not None else power_w
            b = power_w if power_w is not None else self._p
            self._since_j += max(0.0, now - self._t) * 0.5 * (a + b)  # type: ignore[operator]
        self._t = now
        if power_w is not None:
            self._p = power_w
        if counter_mj is not None:
            if self._raw_mj is None:
                # The first counter reading: the figure so far (0, or the power integrated
                # before the counter answered) is its base.
                self._anchor_j = self.total_j or 0.0
            else:
                delta = counter_mj - self._raw_mj
                # A counter that fell restarted (the driver reloaded): it counts since then.
                self._anchor_j += (delta if delta >= 0 else counter_mj) / 1000.0
            self._raw_mj = counter_mj
            self._since_j = 0.0
        if self.total_j is None:
            if counter_mj is None and power_w is None:
                return None
            self.total_j = self._since_j = 0.0  # nothing before the first reading counts
            return self.total_j
        self.total_j = max(self.total_j, self._anchor_j + self._since_j)
        return self.total_j
