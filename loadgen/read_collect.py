"""How long the worker's hub may gather readable streams before each poll.

An engine writes a step's tokens one stream at a time, so a client that polls as soon as one
socket turns readable wakes several times a step for a few tokens each: at 64 streams the
wake-ups cost more than the tokens. libev can instead sleep up to an interval before each
poll and take all that arrived meanwhile in one wake-up (where the C reader reads, only
while a step's round of tokens is incomplete: see loadgen/_hotread.c). The kernel stamped
every read's arrival (SO_TIMESTAMPNS), so reading it later moves no token's time, as long as
two tokens of one stream do not wait in its socket together: one read would then take both
under the later one's stamp. So the interval is LEAST_S, at which such a token is timed at
most that late (a client working through a burst of hundreds of streams reads that late
anyway), and longer, up to MOST_S, where the streams allow it: a quarter of the short gaps
between a stream's tokens seen lately (each finished stream's 10th percentile), so that only
a gap under a quarter of those could share a read. Below a few open streams each token has a
wake-up of its own whatever, and the sleep would add one: no gathering then.

Pure and gevent-free: loadgen.worker_reader applies what it says.
"""

from __future__ import annotations

from collections import deque

# A quarter of the short gaps: a token is read at most that late into the gap to the next.
SHARE = 0.25
MOST_S = 0.002  # past this the next request of a closed loop would wait noticeably
LEAST_S = 0.0005  # the most a token that shares a read with the next is timed late
STREAMS_FROM = 16
WINDOW = 32  # finished streams whose gaps count
MIN_GAPS = 4  # a stream with fewer gaps tells nothing of its pace


class CollectPolicy:
    """Counts the open stamped streams and remembers recent streams' short gaps."""

    __slots__ = ("_open", "_room", "_step", "interval_s")

    def __init__(self) -> None:
        self._open = 0
        # Per recent stream: a quarter of its short gap, the most its pace allows.
        self._room: deque[float] = deque(maxlen=WINDOW)
        self._step = LEAST_S  # the interval they allow, gathering at all (computed per close,
        # not per stream opened: a min over 32 values twice a request was 1% of the CPU)
        self.interval_s = 0.0  # what libev is told now

    def opened(self) -> float | None:
        """A stamped stream began: the new interval if it changes, else None."""
        self._open += 1
        return self._update()

    def closed(self, gaps: list[float]) -> float | None:
        """A stamped stream ended with these gaps between its tokens."""
        self._open -= 1
        if len(gaps) >= MIN_GAPS:
            short = sorted(gaps)[len(gaps) // 10]
            self._room.append(SHARE * short)
            room = min(min(self._room), MOST_S)
            # Powers of two from LEAST_S: a stream's jitter does not reset libev every request.
            step = LEAST_S
            while step * 2 <= room:
                step *= 2
            self._step = step
        return self._update()

    def _update(self) -> float | None:
        want = self._step if self._open >= STREAMS_FROM else 0.0
        if want == self.interval_s:
            return None
        self.interval_s = want
        return want
