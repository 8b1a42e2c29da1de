"""The headroom figure: how much more load fits, which limit comes first, and at what rate.

Windows are built from a box whose engine step takes a fixed part (the weights streamed, the
host's share) plus a part per running sequence (the tensor work): the model the estimate
assumes, so estimates taken at different loads of the one box must name the same limit.
"""

from __future__ import annotations

import pytest
from diag_windows import gpu, make_window

from monitor.diagnosis import Caps, diagnose
from monitor.report import engine_scope
from monitor.window import WindowStats

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
    return make_window(10, gpus=[gpu(1.0, 0.9, tensor, 0.4)], engine=engine)


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
