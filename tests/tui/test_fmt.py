"""The text building blocks: unknown values stay visibly unknown, bars and sparklines scale honestly."""

from __future__ import annotations

from monitor.tui import fmt


def test_unknown_is_a_dash_never_a_zero() -> None:
    assert fmt.pct(None).strip() == "-"
    assert fmt.pct(0.0).strip() == "0%"
    assert fmt.seconds(None) == "-" and fmt.si(None) == "-"
    # An unknown ratio draws no bar at all, a zero draws an empty track.
    assert fmt.bar(None, 10) == " " * 10
    assert fmt.bar(0.0, 10) == fmt.TRACK * 10


def test_bar_length_follows_the_ratio_in_eighths() -> None:
    assert fmt.bar(1.0, 8) == "█" * 8
    assert fmt.bar(0.5, 8) == "████" + fmt.TRACK * 4
    assert fmt.bar(1 / 16, 8) == "▌" + fmt.TRACK * 7
    assert fmt.bar(2.0, 4) == "████"  # clipped, never longer than its cell budget


def test_sparkline_keeps_a_fixed_scale_for_ratios() -> None:
    assert fmt.sparkline([0.0, 0.5, 1.0], 3) == "▁▅█"
    # Right-aligned: the newest value sits at the right edge.
    assert fmt.sparkline([1.0], 4) == "   █"
    assert fmt.sparkline([None, 1.0], 2) == " █"
    # Counts scale to the largest seen when no top is given.
    assert fmt.sparkline([10.0, 20.0], 2, top=None) == "▅█"


def test_units_and_durations_read_like_a_person_writes_them() -> None:
    assert fmt.si(9.32e12, "FLOP/s") == "9.32 TFLOP/s"
    assert fmt.si(1280.0) == "1.28k"
    assert fmt.seconds(0.0175) == "17.5 ms" and fmt.seconds(11.5) == "11.5 s"
    assert fmt.duration(42) == "42 s" and fmt.duration(185) == "3 min 5 s"


def test_roofline_placement_puts_the_engine_left_of_the_ridge_when_memory_bound() -> None:
    line = fmt.placement(27.1, 153.0, 21)
    assert line.index("●") < line.index("|") == 10
    line = fmt.placement(1530.0, 153.0, 21)
    assert line.index("●") > line.index("|")


def test_scopes_and_evidence_in_words() -> None:
    assert fmt.scope_words("gpu:1") == "GPU 1"
    assert fmt.scope_words("engine:m/0@http://h:8000/metrics") == "engine m/0"
    ev = {"name": "sm_active", "value": 0.08, "threshold": 0.22, "op": "<", "unit": "ratio"}
    assert fmt.evidence_words(ev) == "sm active 8% < 22%"
    assert fmt.clip("abcdef", 4) == "abc…"


def test_sparkline_columns_are_whole_spans_of_the_clock() -> None:
    # Readings at 1 s: a column is the mean of one whole 10 s span; the span the latest
    # reading is in is not over, so it is not drawn yet, and a span with no reading is blank.
    times = [float(t) for t in range(5, 27)]
    values = [0.25] * 5 + [0.5] * 10 + [0.75] * 7  # sums exact in binary
    assert fmt.columns(times, values) == [0.25, 0.5]
    assert fmt.columns(times + [47.0], values + [0.1]) == [0.25, 0.5, 0.75, None]
    assert fmt.columns(times[:3], values[:3]) == []  # the first span is not over yet


def test_steady_figures_move_by_more_than_their_tolerance() -> None:
    held = fmt.Steady()
    assert held("util", 0.8449, 0.01, 2) == 0.84
    assert held("util", 0.849, 0.01, 2) == 0.84  # within a point of what is shown
    assert held("util", 0.8351, 0.01, 2) == 0.84
    assert held("util", 0.8512, 0.01, 2) == 0.85  # a point and more away: shown as read
    assert held("util", None, 0.01, 2) is None  # unknown stays unknown


def test_steady_records_hold_rates_within_two_percent_and_never_a_clock() -> None:
    held = fmt.Steady()
    first = {"requests_per_s": 2.2, "time": 1000.0, "analysis": {"littles_latency_s": 13.7}}
    assert held.figures("e", first) == first
    near = {"requests_per_s": 2.23, "time": 1001.0, "analysis": {"littles_latency_s": 13.5}}
    assert held.figures("e", near) == {**first, "time": 1001.0}  # rates held, the clock not
    far = {"requests_per_s": 2.36, "time": 1002.0, "analysis": {"littles_latency_s": 14.1}}
    assert held.figures("e", far) == far


def test_the_headroom_figure_is_held_whole_so_its_line_checks_out() -> None:
    # factor x today's rate / growth is the rate shown: held figure by figure, a line could
    # mix a factor from one window with a rate from the next.
    held = fmt.Steady()

    def room(factor: float, rate: float, growth: float) -> dict:
        return {"analysis": {"headroom": {"factor": factor, "rate_at_limit_rps": rate,
                                          "latency_growth": growth, "limit": "seq-cap",
                                          "limits": {"seq-cap": factor}}}}  # fmt: skip

    first = room(5.30, 4.96, 1.230)
    assert held.figures("e", first) == first
    # The rate moves past 2%, the factor and growth within it: all three are taken up.
    moved = room(5.35, 5.10, 1.240)
    assert held.figures("e", moved)["analysis"]["headroom"] == moved["analysis"]["headroom"]
    # All within 2%: the whole record stays as shown.
    near = room(5.36, 5.12, 1.241)
    assert held.figures("e", near)["analysis"]["headroom"] == moved["analysis"]["headroom"]


def test_a_held_verdict_gives_way_to_new_words_a_new_start_or_a_moved_figure() -> None:
    steady = fmt.Steady()
    ev = {"name": "sm_active", "value": 0.924, "threshold": 0.7, "op": ">=", "unit": "ratio"}
    v = {"cause": "compute-bound", "since": 100.0, "summary": "SMs 92% active.", "evidence": [ev]}
    assert steady.verdict("k", v) is v
    jitter = {**v, "summary": "SMs 93% active.", "evidence": [{**ev, "value": 0.929}]}
    assert steady.verdict("k", jitter) is v
    for moved in (
        {**v, "summary": "SMs 95% active.", "evidence": [{**ev, "value": 0.95}]},
        {**v, "summary": "SMs 92% busy."},
        {**v, "since": 160.0},
        {**v, "evidence": [{**ev, "threshold": 0.8}]},
    ):
        assert steady.verdict("k", moved) is moved
        steady.verdict("k", v)


def test_column_cache_gives_the_columns_worked_out_anew() -> None:
    """The sparkline columns kept from draw to draw are, after every reading, the ones
    worked out from the whole history: as the history fills and then loses its oldest
    readings, across gaps, readings without a time or a value, a clock that steps back
    and another history read with the same cache."""
    import collections
    import random

    rng = random.Random(7)
    cache = fmt.ColumnCache()

    def pick(rep: dict) -> object:
        return rep["gpus"][0]["util"]

    history: collections.deque = collections.deque(maxlen=45)
    t = 1000.0
    for i in range(400):
        t += rng.choice([0.5, 1.0, 1.0, 1.0, 3.0, 25.0]) if i != 200 else -40.0
        util = rng.random() if rng.random() > 0.1 else None
        rep: dict = {"time": None if rng.random() < 0.03 else t, "gpus": [{"util": util}]}
        if rng.random() < 0.02:
            rep = {"time": t, "gpus": []}  # the GPU missing from a reading
        history.append(rep)
        snap = tuple(history)
        want = fmt.columns([r.get("time") for r in snap], fmt.series(snap, pick))
        assert cache("util", snap, pick) == want, i
        if i % 97 == 0:
            other = snap[: len(snap) // 2]
            want = fmt.columns([r.get("time") for r in other], fmt.series(other, pick))
            assert cache("util", other, pick) == want, i
    assert len(want) >= 2
