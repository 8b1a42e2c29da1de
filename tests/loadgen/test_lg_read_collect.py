"""How long the worker gathers readable streams before each poll (loadgen.read_collect)."""

from __future__ import annotations

from loadgen.read_collect import LEAST_S, MOST_S, STREAMS_FROM, WINDOW, CollectPolicy


def _policy(open_streams: int, finished_gaps: list[list[float]]) -> CollectPolicy:
    policy = CollectPolicy()
    for _ in range(open_streams + len(finished_gaps)):
        policy.opened()
    for gaps in finished_gaps:
        policy.closed(gaps)
    return policy


def test_a_few_streams_are_read_as_they_come() -> None:
    # Each token has a wake-up of its own at this load: a sleep before the poll adds one.
    policy = _policy(STREAMS_FROM - 1, [[0.02] * 63] * 4)
    assert policy.interval_s == 0.0


def test_slow_streams_are_gathered_up_to_the_bound() -> None:
    # 20 ms between a stream's tokens: a quarter is 5 ms, more than a closed loop should wait.
    assert _policy(64, [[0.02] * 63] * 4).interval_s == MOST_S


def test_past_the_floor_the_interval_stays_under_a_quarter_of_the_short_gaps() -> None:
    # 4 ms: up to 1 ms; 3.9 ms: under 1 ms, so 0.5; 1.6 ms and 0.8 ms: the floor.
    assert _policy(64, [[0.004] * 63]).interval_s == 0.001
    assert _policy(64, [[0.0039] * 63]).interval_s == LEAST_S
    assert _policy(64, [[0.0016] * 63]).interval_s == LEAST_S
    assert _policy(64, [[0.0008] * 63]).interval_s == LEAST_S


def test_a_stream_with_many_close_tokens_brings_it_to_the_floor() -> None:
    policy = _policy(64, [[0.02] * 63] * 8)
    assert policy.interval_s == MOST_S
    policy.opened()
    # A fast stream: a third of its gaps 0.5 ms (its 10th percentile with them).
    assert policy.closed([0.0005] * 21 + [0.02] * 42) == LEAST_S
    assert policy.interval_s == LEAST_S


def test_a_few_close_tokens_in_a_stream_do_not() -> None:
    # A burst of three (a detokenizer flushing held-back bytes) is under the 10th percentile.
    policy = _policy(64, [[0.0001] * 3 + [0.02] * 60] * 4)
    assert policy.interval_s == MOST_S


def test_old_streams_are_forgotten() -> None:
    policy = _policy(64, [[0.0016] * 63])
    assert policy.interval_s == LEAST_S
    for _ in range(WINDOW):
        policy.opened()
        policy.closed([0.02] * 63)
    assert policy.interval_s == MOST_S


def test_it_says_a_change_once() -> None:
    policy = _policy(64, [])
    assert policy.interval_s == LEAST_S  # no stream finished: nothing known of the pace yet
    policy.opened()
    assert policy.closed([0.02] * 63) == MOST_S
    policy.opened()
    assert policy.closed([0.02] * 63) is None
    for _ in range(64 + 2 - STREAMS_FROM + 1):
        policy.closed([])
    assert policy.interval_s == 0.0
