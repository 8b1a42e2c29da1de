"""Capacity for a target rate from a sweep: the boxes of the swept config a rate needs, from the
best step that met the SLOs, with the margin; and the energy at the saturation point. On
replayed steps, then through a short real sweep of the simulator and `--from-results`."""

from __future__ import annotations

import json
import math
import shutil

import pytest
from sim_sweep import SeqCapSweep

from headroom.cli import main
from loadgen.capacity import sweep_capacity
from loadgen.schema import StepResult


def step(i: int, conc: int, rps: float, ttft95: float, err: float = 0.0) -> StepResult:
    return StepResult(index=i, mode="closed", concurrency=conc, hold_start=0.0, hold_end=10.0,
                      duration_s=10.0, requests_completed=100, requests_failed=0,
                      error_ratio=err, requests_per_s=rps, output_tokens_per_s=rps * 64,
                      ttft_p50_s=ttft95 / 2, ttft_p95_s=ttft95)  # fmt: skip


# Throughput peaks at 8 streams (past it requests only queue: TTFT grows); 16 streams
# completes a little less and misses a 0.5 s TTFT SLO; 32 fails requests.
STEPS = [step(0, 2, 5.0, 0.02), step(1, 4, 9.5, 0.03), step(2, 8, 18.5, 0.05),
         step(3, 16, 17.7, 0.6), step(4, 32, 19.0, 1.2, err=0.3)]  # fmt: skip


def test_boxes_are_the_target_over_the_best_step_meeting_the_slo_with_the_margin() -> None:
    c = sweep_capacity(STEPS, {"ttft_p95_s": 0.5}, 0.1, target_rps=100.0, margin=0.2)
    assert c.goodput_rps_per_box == 18.5 and c.step_index == 2
    assert c.boxes == math.ceil(100 / 18.5 * 1.2) == 7
    assert "step 2 (concurrency 8)" in c.basis and "every SLO" in c.basis
    # No margin: 100 / 18.5 = 5.4, so 6 boxes; a target that is a whole number of boxes
    # is not rounded up by float error.
    assert sweep_capacity(STEPS, {"ttft_p95_s": 0.5}, 0.1, 100.0, 0.0).boxes == 6
    assert sweep_capacity(STEPS, {"ttft_p95_s": 0.5}, 0.1, 37.0, 0.0).boxes == 2


def test_the_highest_throughput_not_the_highest_load_sets_a_box_s_rate() -> None:
    # 16 streams meets a loose SLO but completes less than 8 did: 8 is the box's goodput.
    c = sweep_capacity(STEPS, {"ttft_p95_s": 1.0}, 0.1, 100.0)
    assert c.goodput_rps_per_box == 18.5
    # Without an SLO the error threshold alone bounds it: 32 streams failed 30%, left out.
    c = sweep_capacity(STEPS, {}, 0.1, 100.0)
    assert c.goodput_rps_per_box == 18.5 and "no --slo" in c.basis


def test_no_step_meeting_the_slo_gives_no_box_count() -> None:
    c = sweep_capacity(STEPS, {"ttft_p95_s": 0.001}, 0.1, 10.0)
    assert c.boxes is None and c.goodput_rps_per_box is None
    assert c.basis == "no step met every SLO"


def test_a_sweep_of_the_sim_sizes_for_a_target_and_states_energy_at_saturation(
    seq_cap_sim_sweep: SeqCapSweep, tmp_path, capsys
) -> None:
    # The seq-cap box swept with --slo ttft_p95=1 --target-rate 100 --margin 0.25
    # --gpu-hour-price 3.6 (sim_sweep.SEQ_CAP_FLAGS); copied, as --from-results rewrites it.
    out = tmp_path / "s"
    shutil.copytree(seq_cap_sim_sweep.out, out)
    doc = json.loads((out / "sweep.json").read_text())
    steps = {s["index"]: s for s in doc["steps"]}
    cap = doc["capacity"]
    best = max(
        (s for s in doc["steps"] if s["ttft_p95_s"] <= 1.0), key=lambda s: s["requests_per_s"]
    )
    assert cap["step_index"] == best["index"] and cap["margin"] == 0.25
    assert cap["goodput_rps_per_box"] == pytest.approx(best["requests_per_s"], rel=1e-3)
    assert cap["boxes"] == math.ceil(100 / best["requests_per_s"] * 1.25)
    assert cap["target_rps"] == 100.0 and cap["basis"]
    # The sequence cap of 8 saturates the box: the energy there is that step's.
    sat = doc["saturation"]
    assert sat["reached"] and sat["concurrency"] == 8
    at = steps[sat["step_index"]]
    assert sat["energy_per_token_joules"] == at["energy_per_token_joules"] > 0
    assert sat["cost_per_million_tokens"] == at["cost_per_million_tokens"] > 0
    text = seq_cap_sim_sweep.console
    assert f"capacity: {cap['boxes']} boxes of this config for 100 req/s" in text
    assert "margin 25%" in text
    assert f"at saturation: {sat['energy_per_token_joules']:.3g} J/token, $" in text
    html = (out / "report.html").read_text()
    assert f"<b>{cap['boxes']} boxes</b> of this config" in html
    assert "Energy at saturation:" in html and "per million output tokens" in html

    # The same sweep sized again for another rate, with no load sent.
    rc = main(["sweep", "--from-results", str(out), "--target-rate", "10", "--margin", "0"])
    assert rc == 0
    again = json.loads((out / "sweep.json").read_text())
    assert again["capacity"]["boxes"] == math.ceil(10 / best["requests_per_s"] - 1e-9)
    assert again["capacity"]["margin"] == 0 and again["steps"] == doc["steps"]
    assert "for 10 req/s" in (out / "report.html").read_text()
    assert "capacity: " in capsys.readouterr().out


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--from-results", "NOPE", "--target-rate", "5"], "cannot read"),
        (["--from-results", "DIR"], "give --target-rate"),
        (["--from-results", "DIR", "--target-rate", "0"], "--target-rate 0: want a number above 0"),
        (["--from-results", "DIR", "--target-rate", "5", "--margin", "x"], "--margin x: want"),
        (["--from-results", "BAD", "--target-rate", "5"], "is not a headroom sweep.json"),
        (["--out", "DIR"], "give --target URL and --out DIR"),
    ],
)
def test_bad_capacity_input_is_one_line(tmp_path, capsys, args: list[str], said: str) -> None:
    (tmp_path / "BAD").mkdir()
    (tmp_path / "BAD" / "sweep.json").write_text('{"steps": 3}')
    args = [str(tmp_path / a) if a in ("NOPE", "DIR", "BAD") else a for a in args]
    assert main(["sweep", *args]) == 1
    err = capsys.readouterr().err
    assert said in err and len(err.strip().splitlines()) == 1, err
