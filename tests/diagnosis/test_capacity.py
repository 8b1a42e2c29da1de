"""Capacity for a target rate from one window (`headroom snapshot --target-rate`), against
what the same simulated box completes at its knee (virtual clock: virtual_box.py)."""

from __future__ import annotations

import math

import pytest
from virtual_box import closed_loop, sweep_knee

from headroom.cli import main
from monitor.diagnosis import Caps, diagnose
from monitor.diagnosis.capacity import capacity, capacity_text
from monitor.watch.report import build_report
from simulator.scenarios import build

KW = {"warmup_s": 40.0, "window_s": 20.0}
BOX = build("seq-cap", engine={"num_blocks": 480, "max_model_len": 1024})


def report_at(load: int) -> dict:
    w = closed_loop(BOX, load, **KW)
    d = diagnose(w, caps=Caps(8, 8192))
    return build_report(w, d.verdicts, d.analyses)


@pytest.fixture(scope="module")
def light() -> dict:
    """A window at 3 streams: the box far below its cap of 8."""
    return report_at(3)


def test_boxes_for_a_target_match_what_the_box_completes_at_its_knee(light: dict) -> None:
    knee, _ = sweep_knee(BOX, most=64, **KW)
    measured = knee[4].engines[0].requests_per_s
    target = 5.5 * measured
    c = capacity(light, target)
    assert c["bound_by"] == "seq-cap"
    assert c["per_box_rps"] == pytest.approx(measured, rel=0.25)
    # Enough boxes (the box does 6 needs), and at most the one more that an estimate 20% low
    # asks for.
    need = math.ceil(target / measured)
    assert need <= c["boxes"] <= math.ceil(target / (0.8 * measured)), (c, measured)
    assert c["boxes"] == math.ceil(target / c["per_box_rps"])
    assert c["margin"] == pytest.approx(c["boxes"] * c["per_box_rps"] / target - 1, abs=1e-3)
    boxes = c["boxes"]
    assert capacity_text(c).startswith(f"capacity: {boxes} boxes like this for {target:g} req/s")


def test_a_latency_slo_that_binds_before_the_limit_lowers_each_box_rate() -> None:
    # 16 of 64 slots busy with long answers: each step reads more KV cache as load grows.
    box = build("starved")
    w = closed_loop(box, 16, **KW)
    d = diagnose(w, caps=Caps(64, 8192))
    light = build_report(w, d.verdicts, d.analyses)
    e = light["engines"][0]
    itl, growth = e["itl_p95_s"], e["headroom"]["latency_growth"]
    assert growth > 1.1, e["headroom"]
    free = capacity(light, 10.0)
    # A bound halfway between today's ITL and the limit's.
    slo = itl * (1 + growth) / 2
    c = capacity(light, 10.0, {"itl_p95_s": slo})
    assert c["bound_by"] == "itl_p95"
    assert e["requests_per_s"] < c["per_box_rps"] < free["per_box_rps"]
    assert c["boxes"] >= free["boxes"]
    missed = capacity(light, 10.0, {"itl_p95_s": itl / 2})
    assert missed["boxes"] is None
    assert "the itl_p95 SLO is missed at today's load already" in capacity_text(missed)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--slo", "itl_p95=0.05"], "--slo needs --target-rate"),
        (["--target-rate", "0"], "--target-rate must be a positive requests/s"),
        (["--target-rate", "5", "--slo", "itl_p99=0.05"], "a window reads p50 and p95"),
    ],
)
def test_bad_capacity_flags_are_one_line(capsys, args: list[str], words: str) -> None:
    rc = main(["snapshot", "--vllm", "http://127.0.0.1:9", "--no-nvml", "--no-host", *args])
    err = capsys.readouterr().err
    assert rc == 1 and words in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
