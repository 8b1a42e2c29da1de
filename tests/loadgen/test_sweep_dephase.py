"""A closed-loop step's users, started together, do not send in waves.

With replies of one length (ignore_eos), users started at once finish at once and send
again at once: each wave's prompts reach the engine together and queue for prefill, a
TTFT that a real user population never sees. Against the simulator (8 sequence slots,
8 users, 512-token prompts, 96-token replies), the sweep's sends within the hold are
spread out and its TTFT is lower than with the old start (--no-dephase), side by side.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from headroom.cli import main
from loadgen.schema import StepResult, SweepConfig, WorkerConfig
from loadgen.sweep import Sweep

simulator = pytest.importorskip("simulator")

CLOSE_S = 0.005  # sends this close together count as one wave's


def _sweep(tmp: Path, *flags: str) -> tuple[dict, list[float]]:
    h = simulator.start_sim(scenario="seq-cap", port=0, load=False)  # max_num_seqs 8
    try:
        rc = main(["sweep", "--target", h.url, "--vllm-metrics", h.metrics_url,
                   "--concurrency", "8", "--input-tokens", "512", "--output-tokens", "96",
                   "--step-seconds", "3", "--warmup-seconds", "1.5", "--sample-interval", "0.5",
                   "--quiet", *flags, "--out", str(tmp)])  # fmt: skip
    finally:
        h.stop()
    assert rc == 0
    result = json.loads((tmp / "sweep.json").read_text())
    # A step the machine froze through is measured again: the last one is the step's.
    step = result["steps"][-1]
    if step.get("stalled"):
        pytest.skip(f"this machine froze through both measurements: {step['invalid_reason']}")
    # A request (~0.7 s) fits in the 1.5 s warm-up: no note that the start ran into the hold.
    assert not [n for n in result["notes"] if "warm-up" in n], result["notes"]
    lines = (json.loads(x) for x in (tmp / "requests.jsonl").read_text().splitlines())
    a, b = step["hold_start"], step["hold_end"]
    sends = sorted(r["t0"] for r in lines if r.get("k") == "r" and a <= r["t0"] <= b)
    return step, sends


def _clustered(sends: list[float]) -> float:
    """The share of sends with another send within CLOSE_S of them."""
    near = 0
    for i, t in enumerate(sends):
        before = i > 0 and t - sends[i - 1] < CLOSE_S
        after = i + 1 < len(sends) and sends[i + 1] - t < CLOSE_S
        near += before or after
    return near / len(sends)


def test_users_started_together_send_spread_out(tmp_path) -> None:
    step, sends = _sweep(tmp_path / "spread")
    # ~34 sends in the hold: 0-24% of them within 5 ms of another measured (two users whose
    # requests reach the engine in one step stay together); in waves of 8, 75-94% (the old
    # start, and --no-dephase below). Shorter replies leave too little room between 8 users.
    assert len(sends) >= 16, sends
    spread = _clustered(sends)
    assert spread < 0.4, (spread, sends)
    # The step still held its 8 users: each first request was shortened, never delayed.
    assert step["client_in_flight_mean"] > 7.2, step
    assert step["littles_law_ok"] is not False, step

    old, old_sends = _sweep(tmp_path / "together", "--no-dephase")
    locked = _clustered(old_sends)
    assert locked > 0.5, (locked, old_sends)  # the old start: waves, as on llama.cpp's server
    # Each wave's 8 prompts queue for one prefill: 63-89 ms TTFT measured, 17-19 ms spread.
    assert step["ttft_p50_s"] < 0.6 * old["ttft_p50_s"], (step["ttft_p50_s"], old["ttft_p50_s"])


def _step(index: int, e2e_p50_s: float) -> StepResult:
    return StepResult(index=index, mode="closed", concurrency=8, hold_start=0.0, hold_end=30.0,
                      duration_s=30.0, requests_completed=100, requests_failed=0, error_ratio=0.0,
                      requests_per_s=3.3, output_tokens_per_s=420.0, e2e_p50_s=e2e_p50_s)  # fmt: skip


def test_a_warm_up_shorter_than_a_request_is_said_once(tmp_path) -> None:
    sweep = Sweep(
        SweepConfig(worker=WorkerConfig(target="http://127.0.0.1:9", model="m")), tmp_path
    )
    sweep._warmup_check(_step(0, 4.0), 10.0)
    assert sweep.notes == []
    sweep._warmup_check(_step(1, 12.4), 10.0)
    sweep._warmup_check(_step(2, 20.0), 10.0)
    (note,) = sweep.notes
    assert note.startswith("note: step 1's requests took 12.4 s (median), longer than its 10 s")
    assert note.endswith("--warmup-seconds 25 would cover it")
