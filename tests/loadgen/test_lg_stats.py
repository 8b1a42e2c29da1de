"""Client metrics over a hold window, from hand-built request records."""

from __future__ import annotations

import pytest

from loadgen.records import RecordTail, RequestRecord, WorkerStatus, parse_line
from loadgen.stats import client_cpu, client_stats, percentile, tokens_in_window


def rec(start: float, ttft: float, gaps: list[float], out: int | None = None, err: str | None = None,
        lag: float | None = None) -> RequestRecord:  # fmt: skip
    e2e = ttft + sum(gaps)
    return RequestRecord(
        "w",
        0,
        start,
        e2e,
        ttft,
        tuple(gaps),
        10,
        out if out is not None else 1 + len(gaps),
        err,
        lag,
    )


def test_percentile_interpolates() -> None:
    assert percentile([], 0.5) is None
    assert percentile([3.0], 0.99) == 3.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.5) == pytest.approx(2.5)
    assert percentile([4.0, 1.0, 3.0, 2.0], 1.0) == 4.0


def test_tokens_count_only_inside_the_window() -> None:
    r = rec(0.0, 1.0, [1.0, 1.0, 1.0])  # tokens at 1, 2, 3, 4
    assert tokens_in_window(r, 1.5, 3.5) == 2
    assert tokens_in_window(r, 0.0, 10.0) == 4
    # usage says 8 tokens came in 4 events: each event carries 2
    r2 = rec(0.0, 1.0, [1.0, 1.0, 1.0], out=8)
    assert tokens_in_window(r2, 1.5, 3.5) == 4


def test_window_stats_and_littles_law() -> None:
    # Two back-to-back streams, each request 1 s (ttft 0.2 then 4 gaps of 0.2), over 10 s.
    records = [rec(float(t) + lane * 0.5, 0.2, [0.2] * 4) for lane in (0, 1) for t in range(0, 10)]
    cs = client_stats(records, 2.0, 8.0)
    # requests ending in [2, 8]: lane 0 ends at 2..8 (7), lane 1 ends at 2.5..7.5 (6)
    assert cs.requests_completed == 13
    assert cs.requests_per_s == pytest.approx(13 / 6)
    assert cs.output_tokens_per_s == pytest.approx(10.0, rel=0.05)  # 2 streams x 5 tok/s
    assert cs.in_flight_mean == pytest.approx(2.0)
    assert cs.ttft["p50"] == pytest.approx(0.2)
    assert cs.itl["p99"] == pytest.approx(0.2)
    assert cs.tpot["p50"] == pytest.approx(0.2)
    assert cs.littles_law_in_flight is None  # 13 completions: too few to judge by
    assert cs.error_ratio == 0.0
    # Eight streams give 52 completions: enough for throughput x latency.
    many = [rec(float(t) + lane * 0.125, 0.2, [0.2] * 4) for lane in range(8) for t in range(0, 10)]
    cs8 = client_stats(many, 2.0, 8.0)
    assert cs8.requests_completed >= 20
    assert cs8.littles_law_in_flight == pytest.approx(cs8.requests_per_s * 1.0)
    assert cs8.littles_law_in_flight == pytest.approx(cs8.in_flight_mean, rel=0.15)


def test_errors_and_lag() -> None:
    records = [
        rec(1.0, 0.1, [0.1], lag=0.001),
        rec(2.0, 0.1, [0.1], lag=0.002),
        RequestRecord("w", 0, 3.0, 0.01, None, (), None, None, "HTTP 500: boom", 0.2),
        RequestRecord("w", 0, 3.5, 0.01, None, (), None, None, "HTTP 500: boom", 0.003),
    ]
    cs = client_stats(records, 0.0, 5.0)
    assert cs.requests_completed == 2 and cs.requests_failed == 2
    assert cs.error_ratio == 0.5
    assert cs.errors_sample == ("HTTP 500: boom",)
    assert cs.sched_lag_max_s == 0.2
    assert cs.requests_started == 4


def test_client_cpu_takes_the_busiest_process() -> None:
    sts = [WorkerStatus("a", 1, t, 0.5 * t, 0, None, 0, 1, 0) for t in (0.0, 1.0, 2.0, 3.0)]
    sts += [WorkerStatus("b", 2, t, 0.9 * t, 0, None, 0, 1, 0) for t in (0.0, 1.0, 2.0, 3.0)]
    cpu = client_cpu(sts, 1.0, 2.0)
    assert cpu.busiest_ratio == pytest.approx(0.9)
    assert cpu.total_cpu_s == pytest.approx(1.4)
    assert cpu.processes == 2


def test_record_lines_round_trip_and_tail_waits_for_whole_lines(tmp_path) -> None:
    r = RequestRecord("w1", 3, 1.5, 0.25, 0.125, (0.0625, 0.0625), 9, 3, None, 0.01)
    back = parse_line(r.to_line())
    assert back == r
    path = tmp_path / "records.jsonl"
    tail = RecordTail(path)
    assert list(tail.read_new()) == []
    line = r.to_line()
    path.write_text(line[:20])
    assert list(tail.read_new()) == []
    with open(path, "a") as fh:
        fh.write(line[20:] + "\n" + "garbage\n")
    assert list(tail.read_new()) == [r]


def test_a_holds_rate_spread_is_read_from_its_parts() -> None:
    from loadgen.stats import rate_rse

    # One token every 0.1 s through the hold: every part delivers alike.
    steady = [rec(0.0, 0.05, [0.1] * 79)]
    assert rate_rse(steady, 0.0, 8.0) == pytest.approx(0.0, abs=0.02)
    # The same tokens, all in the first half: the parts disagree, the rate is uncertain.
    bursty = [rec(0.0, 0.05, [0.05] * 79)]
    assert rate_rse(bursty, 0.0, 8.0) > 0.4
    assert rate_rse([], 0.0, 8.0) is None


def test_record_lines_read_back_what_json_would_have_written() -> None:
    """The hand-written line reads back as the json.dumps one does, for awkward values too."""
    import json
    import random

    rng = random.Random(2)
    texts = [None, "", 'say "hi"', "é\n\t\\", "\u2028", "cmpl-1"]
    for _ in range(300):
        r = RequestRecord(
            rng.choice(["w1", 'host "a"']), rng.randrange(-1, 9), 1.7e9 + rng.random(),
            rng.choice([None, rng.random() * 100]), rng.choice([None, rng.random()]),
            tuple(rng.random() * rng.choice([1e-6, 0.02, 3.0]) for _ in range(rng.randrange(70))),
            rng.choice([None, 0, 7]), rng.choice([None, 64]), rng.choice(texts),
            rng.choice([None, 0.0, rng.random()]), rng.choice(texts), rng.choice([None, True, False]),
            rng.choice([None, 32]), rng.choice([None, 64]), rng.choice([None, 2]),
            rng.choice([None, "ab" * 16]),
        )  # fmt: skip
        line = r.to_line()
        assert json.loads(line) == json.loads(r._json_line()), line
        assert parse_line(line) == parse_line(r._json_line())
    odd = RequestRecord("w", 0, 1.0, float("nan"), None, (float("inf"),), None, None, None)
    assert json.loads(odd.to_line())["itl"] == [float("inf")]


def test_record_gaps_printed_in_c_read_as_pythons_own_digits() -> None:
    """The C part prints a record's gaps (loadgen/_hotread.c): the same text as "%.6f", halves,
    signs and big values included, and Python's own where it declines."""
    import random
    import struct

    hot = pytest.importorskip("loadgen._hotread", reason="built without its C part")
    rng = random.Random(5)
    vals = [rng.uniform(-2, 2) for _ in range(20000)] + [rng.uniform(0, 9e5) for _ in range(5000)]
    # Exact halves of a microsecond and their neighbours, where a product's rounding could tip.
    vals += [k / 1e6 + 5e-7 for k in range(0, 20000, 3)] + [0.0000025, 0.1234565, 123.4565]
    vals += [0.0, -0.0, -1e-7, 1e-7, 999999.9999995, 0.02, 3.0]
    bits = (struct.unpack("d", struct.pack("Q", rng.getrandbits(64)))[0] for _ in range(20000))
    vals += [v for v in bits if abs(v) < 1e6]  # tiny, subnormal and huge-exponent floats
    for i in range(0, len(vals), 64):
        chunk = vals[i : i + 64]
        assert hot.fixed6(chunk) == ",".join(f"{v:.6f}" for v in chunk)
    assert hot.fixed6(()) == ""
    for odd in ([1e6], [float("nan")], [float("inf")], [1], [0.5, "x"]):
        assert hot.fixed6(odd) is None, odd  # to_line prints these in Python
    r = RequestRecord("w", 0, 1.0, 0.5, 0.1, (0.0625, 1e6, 2.5), None, None, None)
    assert parse_line(r.to_line()).itl == (0.0625, 1e6, 2.5)
