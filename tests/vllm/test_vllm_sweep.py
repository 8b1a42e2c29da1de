"""`headroom sweep` against a real vLLM (CPU build) with --max-num-seqs 4."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from vllm_support import SEQ_CAP, headroom

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(900)]


def _sweep(url: str, out: Path, otlp_port: int) -> dict[str, Any]:
    # 4 steps of 1 s warm-up + 5 s hold: about half a minute of load. The server sends its
    # request spans to the port the sweep listens on.
    proc = headroom(
        "sweep", "--target", url, "--concurrency", "1,2,4,8",
        "--step-seconds", "5", "--warmup-seconds", "1",
        "--input-tokens", "32", "--output-tokens", "200", "--quiet", "--out", str(out),
        "--otlp-listen", f"127.0.0.1:{otlp_port}",
        timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads((out / "sweep.json").read_text())


def _disturbance(result: dict[str, Any]) -> float:
    """Spread of the token rate per busy slot across steps (0 = even, 1 = wildly uneven).

    On two cores the engine, its API server and the client share the CPU, so each slot
    decodes slower as streams are added: 530 tok/s per slot at 1 stream, 290 at 4 in a CI
    run that saw no stall (a spread of 0.45; 580-670 at every load on a quieter day). A
    step at under 40% of the best per-slot rate lost more than that sharing explains: the
    box stalled, or other work took the cores, and such a step says nothing about where the
    server saturates.
    """
    rates = [
        s["output_tokens_per_s"] / min(s["concurrency"], SEQ_CAP)
        for s in result["steps"]
        if s["output_tokens_per_s"]
    ]
    return 1 - min(rates) / max(rates) if rates else 1.0


def test_short_sweep_saturates_at_the_seq_cap(seq_cap_server: Any, tmp_path: Path) -> None:
    # A 2-core box shared with other work can lose whole seconds, or half its CPU for a while;
    # measure again (at most twice) rather than judge a saturation point from a disturbed run.
    for attempt in range(1, 4):
        result = _sweep(seq_cap_server.url, tmp_path / f"sweep{attempt}", seq_cap_server.otlp_port)
        spread = _disturbance(result)
        if spread <= 0.6:
            break
        print(f"sweep {attempt} disturbed ({spread:.0%} spread of tokens/s per slot)")
    assert _disturbance(result) <= 0.6, "the box was too disturbed to measure: " + json.dumps(
        [(s["concurrency"], s["output_tokens_per_s"], s["host_stalls"]) for s in result["steps"]]
    )

    assert result["stopped"] == "complete"
    steps = {s["concurrency"]: s for s in result["steps"]}
    assert sorted(steps) == [1, 2, 4, 8]
    assert all(s["requests_failed"] == 0 for s in steps.values())
    # Below the cap, more streams bring more tokens; past it, only queueing (TTFT climbs).
    # Past the cap the engine's own gauges say so: never more than the cap running, the rest
    # waiting. Tokens/s alone cannot: on two cores a slot's rate moves 1.3x between steps of
    # one sweep (858 tok/s at 4 streams and 1,094 at 8 in a CI run with the cap holding).
    assert steps[4]["output_tokens_per_s"] > 1.5 * steps[1]["output_tokens_per_s"]
    assert steps[8]["running_max"] <= SEQ_CAP < steps[8]["running_mean"] + 0.5, steps[8]
    assert steps[8]["waiting_mean"] > 0.5 * (8 - SEQ_CAP), steps[8]
    assert steps[4]["waiting_mean"] < 0.5, steps[4]
    assert steps[8]["ttft_p50_s"] > 3 * steps[4]["ttft_p50_s"]

    sat = result["saturation"]
    assert sat["reached"] is True
    assert sat["concurrency"] == SEQ_CAP, sat
    assert sat["cause"] == "seq-cap", sat
    assert sat["inferred_cap"] == SEQ_CAP, sat

    # Each step's median request, taken apart by vLLM's own span of it, adds up to the
    # client's median TTFT; past the cap it waited in the queue, below it hardly at all.
    for c, s in steps.items():
        mr = s["ttft_parts"]["median_request"]
        assert mr["joined"] == mr["of"] == s["requests_completed"], (c, mr)
        total = mr["queue_s"] + mr["engine_other_s"] + mr["prefill_s"] + mr["outside_s"]
        assert total == pytest.approx(s["ttft_p50_s"], rel=0.1), (c, mr, s["ttft_p50_s"])
    past = steps[8]["ttft_parts"]["median_request"]
    assert past["queue_s"] > 0.5 * steps[8]["ttft_p50_s"], past
    assert steps[1]["ttft_parts"]["median_request"]["queue_s"] < 0.2 * steps[1]["ttft_p50_s"]


def test_exact_lengths_and_prefix_cache_hits_on_real_vllm(
    seq_cap_server: Any, tmp_path: Path
) -> None:
    # Through vLLM's own /tokenize: prompts of exactly 64 + 256 tokens of the tiny model, and
    # one shared 256-token prefix, which vLLM's prefix cache serves after the first request.
    out = tmp_path / "prefix"
    proc = headroom(
        "sweep", "--target", seq_cap_server.url, "--concurrency", "2",
        "--step-seconds", "5", "--warmup-seconds", "1", "--input-tokens", "64",
        "--output-tokens", "16", "--shared-prefix-tokens", "256", "--out", str(out),
        timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "prompt lengths exact through the server's /tokenize" in proc.stderr
    (step,) = json.loads((out / "sweep.json").read_text())["steps"]
    assert step["requests_failed"] == 0
    assert step["served_prompt_tokens_mean"] == step["requested_prompt_tokens_mean"] == 320
    assert step["served_completion_tokens_mean"] == 16 and not step["tokens_off"]
    # vLLM caches whole blocks (128 tokens on the CPU build): the BOS and the prefix fill two,
    # 256 of each prompt's 320 tokens.
    assert step["prefix_cache_hit_rate"] == pytest.approx(256 / 320, abs=0.05)
