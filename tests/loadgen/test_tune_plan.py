"""The tune's choices on recorded sweep results: no engine, no processes.

The fixture is a real sweep of the simulator's seq-cap box (max_num_seqs 8) as `headroom tune`
recorded it: knee at 8, cause seq-cap, each step's what-if proposing max_num_seqs 16."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

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


def test_stops_where_the_load_generator_was_the_limit() -> None:
    sweep = copy.deepcopy(SWEEP)
    sweep["saturation"]["cause"] = "client-limited"
    d = plan.decide(
        sweep, _run(sweep), plan.parse_knobs(["max_num_seqs=8:64"], False), {"max_num_seqs": 8}
    )
    assert d.knob is None and "load generator" in d.stop


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
        s["whatif"] = [{"knob": "num_gpu_blocks", "current": 320, "proposed": 640,
                        "predicted": {"gain": 1.9, "limit": "seq-cap"}}]  # fmt: skip
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
