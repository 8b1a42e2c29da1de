"""The stall probe sees the process freeze, in monotonic and in wall-clock time."""

from __future__ import annotations

import sys
import time

from loadgen.stall import StallProbe


def _freeze(seconds: float) -> None:
    """Hold the GIL: the probe's thread cannot run, as in a host-wide freeze."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(10.0)
    try:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass
    finally:
        sys.setswitchinterval(old)


def test_a_freeze_is_one_stall_seen_from_either_clock() -> None:
    with StallProbe() as probe:
        time.sleep(0.05)  # the probe's thread is sleeping its 5 ms periods
        m0, w0 = time.monotonic(), time.time()
        _freeze(0.3)
        m1, w1 = time.monotonic(), time.time()
        time.sleep(0.05)
    n, lost = probe.stalls(m0, m1)
    assert n >= 1 and lost > 0.2, probe.recorded()
    assert probe.stalls_wall(w0, w1)[0] == n
    assert abs(probe.stalls_wall(w0, w1)[1] - lost) < 0.02
    assert probe.worst() > 0.2
    # Long before the freeze there was nothing to see.
    assert probe.stalls_wall(w0 - 3600, w0 - 3000) == (0, 0.0)
