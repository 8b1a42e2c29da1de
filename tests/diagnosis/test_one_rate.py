"""One screen, one figure: the rate that fills the cap reads the same in the starved fix, the
capacity line and the headroom figure, and no face promises a rate past the limit that binds
first (issue 28)."""

from __future__ import annotations

import re

import pytest
from diag_windows import LIGHT, LIGHT_GPU, gpu, make_window, story_a_window

from monitor.diagnosis import diagnose
from monitor.text.capacity import capacity_words, headroom_words
from monitor.watch.report import build_report, render_text
from monitor.window.scopes import engine_scope

MID_GPU = gpu(0.6, 0.45, 0.3, 0.3)

RATE = re.compile(r"(\d+(?:\.\d+)?) req/s")


def _starved() -> tuple:
    w = story_a_window(reported_seqs=64)
    d = diagnose(w)
    return w, d, d.analyses[engine_scope(w.engines[0])]


def test_the_starved_fix_the_capacity_line_and_the_headroom_figure_name_one_rate() -> None:
    w, d, a = _starved()
    top = d.verdicts[0]
    assert top.cause == "starved"
    room = a["headroom"]
    assert room["limit"] == "seq-cap"
    lead = f"{room['rate_at_limit_rps']:.3g} req/s"
    # The first rate each face names is the same figure.
    assert top.fix.startswith(f"send about {lead} to fill 64 slots")
    assert capacity_words(a).startswith(f"64 slots: {lead} would fill them")
    assert f"64 running, {lead}" in headroom_words(room)
    # Any other rate shown beside it says what it is.
    today = f"{a['fill_rate_rps']:.3g}"
    assert today != f"{room['rate_at_limit_rps']:.3g}"
    for text in (top.fix, capacity_words(a)):
        for m in RATE.finditer(text):
            if m.group(1) == today:
                assert text[m.end() :].startswith(" at today's request time")
        assert f"{room['latency_growth']:.3g}x as long" in text
    # x factor / growth is the rate shown: a reader's product checks out.
    now = a["requests_per_s"]
    assert now * room["factor"] / room["latency_growth"] == pytest.approx(
        room["rate_at_limit_rps"], rel=0.01
    )
    # snapshot's text shows the figure too (it had only the JSON's engines[].headroom).
    text = render_text(build_report(w, d.verdicts, d.analyses))
    assert f"  headroom x{room['factor']:.3g} before seq-cap: 64 running, {lead}" in text


@pytest.mark.parametrize(
    ("engine", "cause"),
    [
        # 5.5 running of 256 slots while the KV cache is full and requests queue.
        (dict(running=5.5, waiting=18, kv=0.95, preempt_per_s=1.0, rps=0.9, e2e_s=6.0), "kv-cap"),
    ],
)
def test_under_a_cap_verdict_the_capacity_line_promises_no_rate_past_it(
    engine: dict, cause: str
) -> None:
    w = make_window(30, gpus=[MID_GPU], engine=dict(engine, reported_seqs=256))
    d = diagnose(w)
    assert d.verdicts[0].cause == cause
    a = d.analyses[engine_scope(w.engines[0])]
    assert a["headroom"]["limit"] == cause
    line = capacity_words(a)
    assert "would fill them" not in line
    assert line.startswith(f"256 slots: {cause} binds first, at 5.5 running")
    assert a["fill_first_limit"] == cause
    # The JSON's rate at today's request time stays, for scripts and the exporter.
    assert a["fill_rate_rps"] is not None


def test_the_starved_fix_stops_at_a_limit_that_binds_before_the_slots() -> None:
    # 10 of 64 slots busy, nothing waits, but the KV cache is 45% used: it fills near 20.
    w = make_window(21, gpus=[LIGHT_GPU], engine=dict(LIGHT, kv=0.45, reported_seqs=64))
    d = diagnose(w)
    top = d.verdicts[0]
    a = d.analyses[engine_scope(w.engines[0])]
    assert top.cause == "starved" and a["headroom"]["limit"] == "kv-cap"
    assert "to fill 64 slots" not in top.fix
    assert top.fix.startswith(
        f"send more load, up to about {a['headroom']['rate_at_limit_rps']:.3g} req/s "
        f"({a['headroom']['concurrency_at_limit']:.3g} running): kv-cap binds there"
    )
    assert "kv-cap binds first" in capacity_words(a)


def test_the_lead_shows_no_lower_confidence_than_a_verdict_under_it_and_its_fix_comes_first() -> (
    None
):
    # The demo's cpu-bound box: 32 of 256 slots busy, nothing waits, the GPU busy 30% of the
    # time while the host CPU is saturated. cpu-bound leads (CPU in the path comes before
    # too little load), at 70%, where starved on its own reads 85%.
    w = make_window(
        21,
        gpus=[gpu(0.3, 0.27, 0.06, 0.24)],
        engine=dict(running=32, rps=0.8, e2e_s=40.0, queue_s=0.0, reported_seqs=256),
        host=dict(thread=0.4, busy=1.0),
    )
    d = diagnose(w)
    lead, *rest = d.verdicts
    assert lead.cause == "cpu-bound"
    starved = next(v for v in rest if v.cause == "starved")
    assert all(v.confidence <= lead.confidence for v in rest)
    assert starved.confidence == lead.confidence and starved.confidence_alone == 0.85
    # Its "send more load" waits for the lead's fix, and the JSON keeps both figures.
    assert starved.fix.startswith("after the cpu-bound fix: send ")
    js = build_report(w, d.verdicts, d.analyses)["verdicts"]
    assert [v["confidence"] for v in js] == sorted((v["confidence"] for v in js), reverse=True)
    assert next(v for v in js if v["cause"] == "starved")["confidence_alone"] == 0.85
