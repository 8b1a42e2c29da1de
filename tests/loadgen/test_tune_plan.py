"""The tune's choices on recorded sweep results: no engine, no processes.

The fixture is a real sweep of the simulator's seq-cap box (max_num_seqs 8) as `headroom tune`
recorded it: knee at 8, cause seq-cap, each step's what-if proposing max_num_seqs 16."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from whatif_rows import change

from loadgen import tune_plan as plan
from loadgen.tune import report
from monitor.core.errors import ConfigError

SWEEP = json.loads(
    (Path(__file__).parent.parent / "fixtures" / "loadgen" / "tune_seqcap_sweep.json").read_text()
)


def _run(sweep: dict) -> dict:
    return {"index": 0, "status": "ok", "knobs": {"max_num_seqs": 8}, **plan.summarise(sweep)}


def test_seq_cap_knee_raises_max_num_seqs_by_the_whatif() -> None:
    knobs = plan.parse_knobs(["max_num_seqs=8:256"], grid=False)
    run = _run(SWEEP)
    assert run["saturation_concurrency"] == 8 and run["cause"] == "seq-cap"
    d = plan.decide(SWEEP, run, knobs, {"max_num_seqs": 8})
    assert d.stop is None
    assert (d.knob, d.current, d.to) == ("max_num_seqs", 8, 16)
    assert isinstance(d.to, int)  # the next command reads --max-num-seqs 16, not 16.0
    # The knee's window (its own step first) gave the prediction: about twice the tokens.
    assert d.step_concurrency == 8
    assert 1.8 < d.gain < 2.1
    assert d.predicted_tok_s == pytest.approx(run["throughput_tok_s"] * d.gain, rel=0.01)


def test_bound_clips_the_change_and_scales_the_gain() -> None:
    knobs = plan.parse_knobs(["max_num_seqs=8:12"], grid=False)
    d = plan.decide(SWEEP, _run(SWEEP), knobs, {"max_num_seqs": 8})
    assert d.to == 12
    assert 1.3 < d.gain < 1.6  # half way to 16 buys about half the doubling


def test_stops_at_the_bound() -> None:
    knobs = plan.parse_knobs(["max_num_seqs=4:8"], grid=False)
    d = plan.decide(SWEEP, _run(SWEEP), knobs, {"max_num_seqs": 8})
    assert d.knob is None and "bound 8" in d.stop


def test_stops_when_the_cause_names_no_knob_given() -> None:
    knobs = plan.parse_knobs(["max_num_batched_tokens=512:8192"], grid=False)
    d = plan.decide(SWEEP, _run(SWEEP), knobs, {"max_num_batched_tokens": 512})
    assert d.knob is None and "seq-cap" in d.stop and "max_num_batched_tokens" in d.stop


# The kv-cap box's miss (bench/results/tune_vs_grid_sim.txt, 2026-12-03 09:42): at 640 blocks
# and max_num_seqs 64 the knee sat at 64 streams, named client-limited on 2 cores, and the tune
# stopped at 0.74 of the grid's best. The engine's own what-if at that knee: the KV cache full
# first, the sequence cap just behind it.
KV_KNEE_WHATIF = [
    change("num_gpu_blocks", 640, 854, 1.1, "seq-cap"),
    change("max_num_seqs", 64, 128, 1.5, "kv-cap"),
]
KV_KNOBS = ["num_blocks=320:2560", "max_num_seqs=64:256"]
KV_NOW = {"num_blocks": 640, "max_num_seqs": 64}


def _client_limited(whatif: list[dict]) -> dict:
    sweep = copy.deepcopy(SWEEP)
    sweep["saturation"]["cause"] = "client-limited"
    for s in sweep["steps"]:
        s["whatif"] = copy.deepcopy(whatif)
    return sweep


def test_a_knee_the_load_generator_set_steps_the_knobs_the_engine_s_what_if_names() -> None:
    sweep = _client_limited(KV_KNEE_WHATIF)
    run = {**_run(sweep), "knobs": dict(KV_NOW)}
    d = plan.decide(sweep, run, plan.parse_knobs(KV_KNOBS, False), KV_NOW)
    assert d.stop is None, d.stop
    # The KV cache's change, and the sequence cap's behind it in the same relaunch: the first
    # alone stops just past the cap, which then binds. Made together, both are stretched to
    # the first's doubling (640 -> 854 and 64 -> 128 proposed; nothing else behind them here).
    assert (d.knob, d.current, d.proposed, d.to) == ("num_blocks", 640, 854, 1280)
    assert d.also == [{"knob": "max_num_seqs", "current": 64, "proposed": 128, "to": 192,
                       "limit": "kv-cap"}]  # fmt: skip
    assert d.stretch == pytest.approx(1280 / 854, rel=1e-3)
    assert d.gain > 1.1 * 1.5
    assert "client-limited" in d.note and "measures" in d.note
    # The next run is launched with both.
    prev = {**run, "decision": d.to_json()}
    nxt = {"index": 1, "status": "ok", "knobs": {"num_blocks": 1280, "max_num_seqs": 192},
           "throughput_tok_s": 6000.0, "cause": "kv-cap"}  # fmt: skip
    row = plan.prediction_row(prev, nxt)
    assert row["also"] == [{"knob": "max_num_seqs", "current": 64, "to": 192}]
    assert row["predicted_next_limit"] == "kv-cap"
    page = report({"mode": "tune", "launch": "x", "runs": [prev, nxt], "predictions": [row],
                   "best": plan.best_run([prev, nxt], False), "stopped": "done"})  # fmt: skip
    assert "num_blocks 640 -> 1280 and max_num_seqs 64 -> 192" in page


def test_the_measurement_ends_blind_steps_that_gain_nothing() -> None:
    sweep = _client_limited(KV_KNEE_WHATIF)
    knobs = plan.parse_knobs(KV_KNOBS, False)
    first = {**_run(sweep), "knobs": dict(KV_NOW), "throughput_tok_s": 5000.0}
    first["decision"] = plan.decide(sweep, first, knobs, KV_NOW).to_json()
    now = {"num_blocks": 854, "max_num_seqs": 128}
    # The load generator set the knee again and the change bought 2%: stop there.
    flat = {**_run(sweep), "index": 1, "knobs": now, "throughput_tok_s": 5100.0}
    d = plan.decide(sweep, flat, knobs, now, first)
    assert d.knob is None and "measured x1.02" in d.stop
    # It bought 20%: keep following the engine's what-if.
    more = {**flat, "throughput_tok_s": 6000.0}
    assert plan.decide(sweep, more, knobs, now, first).knob is not None


def test_a_knee_the_load_generator_set_stops_where_the_what_if_names_no_knob_given() -> None:
    sweep = _client_limited([])
    d = plan.decide(
        sweep, _run(sweep), plan.parse_knobs(["max_num_seqs=8:64"], False), {"max_num_seqs": 8}
    )
    assert d.knob is None and "load generator" in d.stop


def test_the_what_if_s_next_change_waits_where_its_knob_is_not_given_or_clipped() -> None:
    sweep = copy.deepcopy(SWEEP)
    sweep["saturation"]["cause"] = "kv-cap"
    for s in sweep["steps"]:
        s["whatif"] = copy.deepcopy(KV_KNEE_WHATIF)
    alone = plan.decide(sweep, _run(sweep), plan.parse_knobs(["num_blocks=320:2560"], False),
                        {"num_blocks": 640})  # fmt: skip
    assert (alone.knob, alone.to, alone.also) == ("num_blocks", 854, None)
    assert alone.gain == pytest.approx(1.1)
    clipped = plan.decide(sweep, _run(sweep), plan.parse_knobs(["num_blocks=320:2560",
                          "max_num_seqs=64:100"], False), KV_NOW)  # fmt: skip
    assert (clipped.knob, clipped.also) == ("num_blocks", None)


def test_stops_under_five_percent_predicted_gain() -> None:
    sweep = copy.deepcopy(SWEEP)
    for s in sweep["steps"]:
        for w in s["whatif"] or []:
            w["predicted"]["gain"] = 1.03
    d = plan.decide(
        sweep, _run(sweep), plan.parse_knobs(["max_num_seqs=8:64"], False), {"max_num_seqs": 8}
    )
    assert d.knob is None and "1.03x" in d.stop


def test_stops_where_the_slo_binds_before_the_knee() -> None:
    sweep = copy.deepcopy(SWEEP)
    sweep["goodput"] = {"met": True, "concurrency": 4, "output_tokens_per_s": 500.0}
    run = _run(sweep)
    assert run["slo_pass"] is True and run["goodput_tok_s"] == 500.0
    d = plan.decide(sweep, run, plan.parse_knobs(["max_num_seqs=8:64"], False), {"max_num_seqs": 8})
    assert d.knob is None and "SLO binds" in d.stop
    sweep["goodput"] = {"met": False, "reason": "no step met every SLO"}
    d = plan.decide(
        sweep, _run(sweep), plan.parse_knobs(["max_num_seqs=8:64"], False), {"max_num_seqs": 8}
    )
    assert "SLO binds" in d.stop


def test_simulator_name_for_kv_blocks_follows_kv_cap() -> None:
    sweep = copy.deepcopy(SWEEP)
    sweep["saturation"]["cause"] = "kv-cap"
    for s in sweep["steps"]:
        s["whatif"] = [change("num_gpu_blocks", 320, 640, 1.9, "seq-cap")]
    knobs = plan.parse_knobs(["max_num_seqs=8:64", "num_blocks=320:2000"], False)
    d = plan.decide(sweep, _run(sweep), knobs, {"max_num_seqs": 8, "num_blocks": 320})
    assert (d.knob, d.to) == ("num_blocks", 640)


def test_prediction_row_sets_predicted_beside_measured() -> None:
    d = plan.decide(
        SWEEP, _run(SWEEP), plan.parse_knobs(["max_num_seqs=8:64"], False), {"max_num_seqs": 8}
    )
    prev = {**_run(SWEEP), "decision": d.to_json()}
    nxt = {"index": 1, "status": "ok", "knobs": {"max_num_seqs": 16}, "throughput_tok_s": 2000.0,
           "cause": "seq-cap"}  # fmt: skip
    row = plan.prediction_row(prev, nxt)
    assert row["from"] == 8 and row["to"] == 16 and row["measured_tok_s"] == 2000.0
    assert row["ratio"] == pytest.approx(d.predicted_tok_s / 2000.0, abs=0.001)
    state = {"mode": "tune", "launch": "x {max_num_seqs}", "runs": [prev, nxt],
             "best": plan.best_run([prev, nxt], False), "predictions": [row], "stopped": "done"}  # fmt: skip
    assert state["best"]["run"] == 1
    page = report(state)
    assert "max_num_seqs 8 -> 16" in page and "2000" in page


@pytest.mark.parametrize(
    ("specs", "grid", "words"),
    [
        (["max_num_seqs"], False, "NAME=START:BOUND"),
        (["max_num_seqs=eight:16"], False, "integers"),
        (["max_num_seqs=16:8"], False, "below the start"),
        (["max_seqs=8:16"], False, "unknown knob max_seqs"),
        (["max_num_seqs=8,16"], False, "for --grid"),
        (["max_num_seqs=8:16"], True, "--grid wants the values"),
        (["max_num_seqs=8:16", "max_num_seqs=8:32"], False, "twice"),
        ([], False, "give the knobs"),
    ],
)
def test_bad_knobs_are_one_line(specs: list[str], grid: bool, words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        plan.parse_knobs(specs, grid)


def test_template_checks() -> None:
    knobs = plan.parse_knobs(["max_num_seqs=8:16"], False)
    with pytest.raises(ConfigError, match=r"has no \{max_num_seqs\}"):
        plan.check_template("--launch", "vllm serve m --max-num-seqs 8", knobs, need_all=True)
    with pytest.raises(ConfigError, match=r"\{gmu\} is no --knob"):
        plan.check_template("--launch", "x {max_num_seqs} {gmu}", knobs, need_all=True)
    # JSON in a flag is no placeholder.
    plan.check_template("--launch", "x {max_num_seqs} --c '{\"level\": 3}' {port}", knobs, True)
    assert plan.fill("a {max_num_seqs} b {port}", {"max_num_seqs": 16, "port": 9}) == "a 16 b 9"


def test_grid_is_every_combination_in_order() -> None:
    knobs = plan.parse_knobs(["max_num_seqs=8,16", "max_num_batched_tokens=2048,4096,8192"], True)
    configs = plan.grid_configs(knobs)
    assert len(configs) == 6
    assert configs[0] == {"max_num_seqs": 8, "max_num_batched_tokens": 2048}
    assert configs[-1] == {"max_num_seqs": 16, "max_num_batched_tokens": 8192}


def test_where_the_cause_s_knob_has_no_what_if_the_what_if_s_own_knob_is_stepped() -> None:
    # The kv-cap box again (session 15's run): at 640 blocks and max_num_seqs 64 the sweep named
    # kv-cap while the engine's what-if at the knee, told the cap, led with the cap (both bind
    # at 64 sequences) and proposed nothing for the blocks: the tune had stopped there.
    sweep = copy.deepcopy(SWEEP)
    sweep["saturation"]["cause"] = "kv-cap"
    for s in sweep["steps"]:
        s["whatif"] = copy.deepcopy(KV_KNEE_WHATIF[1:])
    d = plan.decide(sweep, _run(sweep), plan.parse_knobs(KV_KNOBS, False), KV_NOW)
    assert (d.knob, d.current, d.to) == ("max_num_seqs", 64, 128)
    assert "kv-cap" in d.note and "measures" in d.note
