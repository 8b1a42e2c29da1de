"""The headroom figure: how much more load fits, which limit comes first, and at what rate.

Windows are built from a box whose engine step takes a fixed part (the weights streamed, the
host's share) plus a part per running sequence (the tensor work): the model the estimate
assumes, so estimates taken at different loads of the one box must name the same limit.
"""

from __future__ import annotations

import dataclasses

import pytest
from diag_windows import gpu, make_window

from monitor.diagnosis import Caps, diagnose
from monitor.window.scopes import engine_scope
from monitor.window.stats import WindowStats

FIXED_S = 0.0262  # per step
PER_SEQ_S = 0.0124  # per running sequence per step: the tensor work
STEPS_PER_REQUEST = 16
TENSOR_FULL = 0.9  # what the tensor pipes read when compute alone fills the step


def box_window(
    running: float, *, cap: int | None = None, kv_per_seq: float | None = None
) -> WindowStats:
    step = FIXED_S + PER_SEQ_S * running
    latency = STEPS_PER_REQUEST * step
    tensor = TENSOR_FULL * PER_SEQ_S * running / step
    engine = dict(
        running=running,
        waiting=0.0,
        rps=running / latency,
        e2e_s=latency,
        queue_s=0.0,
        kv=None if kv_per_seq is None else kv_per_seq * running,
        reported_seqs=cap,
    )
    # No DRAM reading: nothing says the tensor work overlaps a weights' stream, so the step
    # model adds it to the fixed part, as this box does.
    return make_window(10, gpus=[gpu(1.0, 0.9, tensor, None)], engine=engine)


def room(w: WindowStats, caps: Caps | None = None) -> dict:
    d = diagnose(w, caps=caps or Caps())
    return d.analyses[engine_scope(w.engines[0])]["headroom"]


def throughput(n: float) -> float:
    return n / (STEPS_PER_REQUEST * (FIXED_S + PER_SEQ_S * n))


def test_compute_limit_is_where_a_doubling_gains_under_ten_percent() -> None:
    r = room(box_window(1.0))
    assert r["limit"] == "compute"
    n = r["concurrency_at_limit"]
    # On the box itself: a doubling from the estimate gains under 10%, from half of it more.
    assert throughput(2 * n) / throughput(n) < 1.1 + 1e-3
    assert throughput(n) / throughput(n / 2) > 1.1 - 1e-3
    # The rate there is what the box does at that concurrency, not one stream's rate times
    # the factor (each request takes longer as the steps carry more sequences).
    assert r["rate_at_limit_rps"] == pytest.approx(throughput(n), rel=0.02)
    assert r["latency_growth"] > 2


@pytest.mark.parametrize("running", [1.0, 2.0, 4.0])
def test_estimates_from_any_light_load_of_one_box_agree(running: float) -> None:
    # The old figure (0.9 / tensor active, time per request unchanged) read 2.9, 3.9 and 4.6
    # streams from windows at 1, 2 and 3 streams of one simulated box whose sweep then
    # measured 7.
    base = room(box_window(1.0))
    r = room(box_window(running))
    assert r["limit"] == "compute"
    assert r["concurrency_at_limit"] == pytest.approx(base["concurrency_at_limit"], rel=0.02)
    assert r["rate_at_limit_rps"] == pytest.approx(base["rate_at_limit_rps"], rel=0.02)


def test_a_box_already_at_its_compute_limit_has_no_headroom() -> None:
    r = room(box_window(12.0))
    assert r["limit"] == "compute" and r["factor"] == 1.0
    assert r["concurrency_at_limit"] == pytest.approx(12.0)


def test_a_cap_before_compute_still_counts_the_longer_steps_in_its_rate() -> None:
    r = room(box_window(1.0, cap=4))
    assert (r["limit"], r["factor"], r["concurrency_at_limit"]) == ("seq-cap", 4.0, 4.0)
    # 4 sequences ride each step: each request takes (26.2 + 4 x 12.4) / 38.6 ms longer.
    assert r["rate_at_limit_rps"] == pytest.approx(throughput(4.0), rel=0.02)
    assert r["limits"]["compute"] > 4


def test_kv_limit_from_the_cache_each_sequence_holds() -> None:
    r = room(box_window(1.0, kv_per_seq=0.1))
    # 90% full at 9 sequences, just before compute's knee (4.5 x (1 - s) / s, s = 0.321:
    # 9.5 streams).
    assert r["limit"] == "kv-cap"
    assert r["concurrency_at_limit"] == pytest.approx(9.0, rel=0.02)


def test_without_gpu_readings_each_request_keeps_its_time() -> None:
    light = dict(running=2.0, waiting=0.0, rps=1.0, e2e_s=2.0, queue_s=0.0, reported_seqs=8)
    w = make_window(10, engine=light)
    r = room(w)
    assert (r["limit"], r["concurrency_at_limit"], r["rate_at_limit_rps"]) == ("seq-cap", 8.0, 4.0)
    assert r["latency_growth"] == 1.0


# A decode-heavy box bound by memory: each step streams the weights once (8B parameters of
# 2 bytes) and every running sequence's KV cache (3,000 tokens of 128 KiB), at 4 TB/s; the
# tensor work per token, done while the bytes stream, is small beside it. vLLM's MFU
# counters say FLOPs and bytes.
PARAMS = 8e9
WEIGHT_BYTES = 2 * PARAMS
KV_PER_SEQ = 3000 * 131072
BANDWIDTH = 4.0e12
FLOPS_PEAK = 700e12
STEP_FIXED_S = 0.001
DRAM_FULL = 0.9  # headroom_dram_max: what DRAM activity reads when memory alone fills a step


def mem_step(n: float, weights: float = WEIGHT_BYTES) -> float:
    return STEP_FIXED_S + max((weights + n * KV_PER_SEQ) / BANDWIDTH, 2 * PARAMS * n / FLOPS_PEAK)


def mem_throughput(n: float, weights: float = WEIGHT_BYTES) -> float:
    return n / mem_step(n, weights)


def mem_window(running: float, weights: float = WEIGHT_BYTES) -> WindowStats:
    step = mem_step(running, weights)
    steps = 1.0 / step
    dram = DRAM_FULL * (weights + running * KV_PER_SEQ) / BANDWIDTH / step
    tensor = TENSOR_FULL * 2 * PARAMS * running / FLOPS_PEAK / step
    latency = 200 * step  # 200 tokens a request
    engine = dict(
        running=running, waiting=0.0, rps=running / latency, e2e_s=latency, queue_s=0.0,
        steps_per_s=steps, tokens_per_step=running, gen_tps=running * steps,
        flops_per_s=2 * PARAMS * running * steps,
        bytes_per_s=(weights + running * KV_PER_SEQ) * steps,
    )  # fmt: skip
    return make_window(10, gpus=[gpu(1.0, 0.9, tensor, dram)], engine=engine)


@pytest.mark.parametrize("running", [8.0, 16.0, 64.0])
def test_bandwidth_limit_is_where_the_kv_reads_make_a_doubling_gain_under_ten_percent(
    running: float,
) -> None:
    r = room(mem_window(running))
    assert r["limit"] == "bandwidth"
    n = r["concurrency_at_limit"]
    # The box's own knee: a doubling from the estimate gains about 10%, from half of it more.
    assert mem_throughput(2 * n) / mem_throughput(n) == pytest.approx(1.1, abs=0.01)
    assert mem_throughput(n) / mem_throughput(n / 2) > 1.1
    assert r["rate_at_limit_rps"] == pytest.approx(mem_throughput(n) / 200, rel=0.05)


def test_fp8_weights_are_half_the_bytes_a_step_streams() -> None:
    # The same FLOPs per token read half the weight bytes: more of each step is KV reads.
    w = mem_window(8.0, weights=PARAMS)
    bf16 = room(w)
    fp8 = room(w, Caps(precision="fp8"))
    assert fp8["limit"] == "bandwidth"
    n = fp8["concurrency_at_limit"]
    assert mem_throughput(2 * n, PARAMS) / mem_throughput(n, PARAMS) == pytest.approx(1.1, abs=0.01)
    # Taken for 2-byte weights, the KV share reads too small: the limit too far off.
    assert bf16["concurrency_at_limit"] > 1.3 * n


def test_a_kv_share_too_small_to_tell_from_the_weights_estimate_is_no_limit() -> None:
    # At one stream the KV cache is 2% of the bytes: inside the weights estimate's error.
    r = room(mem_window(1.0))
    assert r is None or "bandwidth" not in r["limits"]


def test_without_the_engine_s_byte_counters_bandwidth_is_no_limit() -> None:
    w = mem_window(16.0)
    e = w.engines[0]
    bare = dataclasses.replace(w, engines=(dataclasses.replace(e, read_bytes_per_s=None),))
    r = room(bare)
    assert "bandwidth" not in r["limits"]
    assert r["limits"]["compute"] > room(w)["limits"]["bandwidth"]
