"""Sweeps against the simulator find the saturation point and its cause.

Each scenario's engine is the simulator's; the load is the sweep's own (the
simulator's built-in load is off). Steps are short (4 s after 1.5 s warm-up),
so the whole module takes a few minutes on two cores.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from sim_sweep import SeqCapSweep

from headroom.cli import main

simulator = pytest.importorskip("simulator")

FIXTURES = Path(__file__).parent.parent / "fixtures" / "loadgen"
SHORT = ["--step-seconds", "4", "--warmup-seconds", "1.5", "--sample-interval", "0.5", "--quiet"]


@pytest.fixture
def sim() -> Iterator:
    handles = []

    def start(
        scenario: str,
        config: Path | dict | None = None,
        otlp: str | None = None,
        load: bool = False,
    ):
        h = simulator.start_sim(
            scenario=scenario, port=0, load=load, config=config, otlp_traces_endpoint=otlp
        )
        handles.append(h)
        return h

    yield start
    for h in handles:
        h.stop()


def sweep(h, out: Path, *flags: str) -> dict:
    rc = main(["sweep", "--target", h.url, "--vllm-metrics", h.metrics_url, "--dcgm-exporter",
               h.gpu_metrics_url, *SHORT, *flags, "--out", str(out)])  # fmt: skip
    assert rc == 0
    return json.loads((out / "sweep.json").read_text())


def quick_sweep(url: str, concurrency: str, out: Path) -> int:
    """A sweep given only --target: 3 s steps after 1 s of warm-up, 16-token answers."""
    return main(["sweep", "--target", url, "--concurrency", concurrency, "--step-seconds", "3",
                 "--warmup-seconds", "1", "--sample-interval", "0.5", "--output-tokens", "16",
                 "--out", str(out)])  # fmt: skip


def _by_load(result: dict) -> dict[int, dict]:
    return {s["concurrency"]: s for s in result["steps"] if s["valid"]} | {
        s["concurrency"]: s for s in result["steps"] if s["concurrency"] not in
        {x["concurrency"] for x in result["steps"] if x["valid"]}
    }  # fmt: skip


def test_seq_cap_saturates_at_max_num_seqs(seq_cap_sim_sweep: SeqCapSweep) -> None:
    # The box sends each request's span to the sweep (--otlp-listen), as vLLM can; 2, 4, 8
    # and 16 streams on its max_num_seqs of 8.
    r = seq_cap_sim_sweep.doc
    sat = r["saturation"]
    assert sat["reached"] and sat["concurrency"] == 8
    assert sat["cause"] == "seq-cap"
    assert sat["inferred_cap"] == 8
    steps = _by_load(r)
    assert steps[16]["waiting_mean"] > 4 and steps[16]["running_max"] == 8
    assert steps[16]["output_tokens_per_s"] < 1.15 * steps[8]["output_tokens_per_s"]
    assert steps[4]["littles_law_ok"] is True
    # Each step's median request taken apart by its own span adds up to the client's median
    # TTFT; past the cap the median request spent most of it queueing.
    for c, s in steps.items():
        mr = s["ttft_parts"]["median_request"]
        assert mr["joined"] == mr["of"] == s["requests_completed"] > 0, (c, mr)
        total = mr["queue_s"] + mr["engine_other_s"] + mr["prefill_s"] + mr["outside_s"]
        assert total == pytest.approx(s["ttft_p50_s"], rel=0.1), (c, mr, s["ttft_p50_s"])
    assert steps[16]["ttft_parts"]["median_request"]["queue_s"] > 0.5 * steps[16]["ttft_p50_s"]
    # Below it, a request waits only for the engine's next step (a few ms: 13-34% of an
    # 11 ms TTFT seen): never the larger part.
    assert steps[2]["ttft_parts"]["median_request"]["queue_s"] < 0.5 * steps[2]["ttft_p50_s"]


def test_kv_cap_saturates_where_the_cache_fills(sim, tmp_path) -> None:
    h = sim("kv-cap")  # 320 blocks of 16: 5,120 tokens, ~7 requests of 512 + 256 tokens
    r = sweep(
        h,
        tmp_path / "k",
        "--concurrency",
        "4,8,16",
        "--input-tokens",
        "512",
        "--output-tokens",
        "256",
    )
    sat = r["saturation"]
    assert sat["reached"] and sat["concurrency"] == 8
    assert sat["cause"] == "kv-cap"
    steps = _by_load(r)
    assert steps[16]["kv_cache_usage_mean"] > 0.85
    assert steps[16]["waiting_mean"] > 4


def test_compute_bound_saturates_when_prefill_fills_the_gpu(sim, tmp_path) -> None:
    h = sim("compute-bound")  # 2,048-token prompts, 8,192-token steps
    r = sweep(
        h,
        tmp_path / "c",
        "--concurrency",
        "2,4,8,16",
        "--input-tokens",
        "2048",
        "--output-tokens",
        "16",
    )
    sat = r["saturation"]
    steps = [(s["concurrency"], round(s["output_tokens_per_s"]), s["output_tokens_per_s_rse"],
              s["host_stall_s"], s["verdict"]) for s in r["steps"]]  # fmt: skip
    assert sat["reached"] and sat["concurrency"] in (4, 8), (sat, steps)
    assert sat["cause"] == "compute-bound", (sat, steps)
    past = _by_load(r)[16]
    assert past["gpu"]["tensor_active"] > 0.5


def test_cpu_bound_saturates_with_the_gpu_half_idle(sim, tmp_path) -> None:
    h = sim("cpu-bound", FIXTURES / "cpu-bound-5ms-per-seq.toml")
    r = sweep(
        h,
        tmp_path / "u",
        "--concurrency",
        "8,16,32,64",
        "--input-tokens",
        "128",
        "--output-tokens",
        "24",
    )
    sat = r["saturation"]
    steps = [(s["concurrency"], round(s["output_tokens_per_s"]), s["verdict"]) for s in r["steps"]]
    # tok/s = n / (24 ms + 5 ms x n): +13% per doubling from 16 to 32, +7% from 32 to 64.
    # The knee of such a curve is soft: a few percent of noise on these machines moves it by
    # a doubling, so 16 or 32 is the right answer; the cause is not. (A step at 128 streams
    # cost 20 s of the suite: its requests of 5-6 s drain before the next step.)
    assert sat["reached"] and sat["concurrency"] in (16, 32), (sat, steps)
    assert sat["cause"] == "cpu-bound", (sat, steps)
    assert _by_load(r)[64]["gpu"]["util"] < 0.5, steps


def test_a_sweep_of_the_sim_reads_its_gpu_page_without_being_told(sim, tmp_path, capsys) -> None:
    """`headroom sim` serves its GPU at /gpu/metrics: a sweep given only --target reads it
    (it read "no GPU readings" with a util column of dashes). One load: the verdict says
    one load cannot show saturation, and uniform prompts show no prefix-cache hit rate."""
    h = sim("compute-bound")
    out = tmp_path / "g"
    rc = quick_sweep(h.url, "2", out)
    err = capsys.readouterr().err
    assert rc == 0, err
    r = json.loads((out / "sweep.json").read_text())
    gpu = r["steps"][0]["gpu"]
    assert gpu["gpus"] == 1 and gpu["util"] is not None and gpu["util"] > 0, gpu
    assert f"note: GPU readings from {h.gpu_metrics_url}, found beside the engine" in err
    assert any("found beside the engine" in n for n in r["notes"])
    assert "no GPU readings" not in (out / "report.html").read_text()
    sat = r["saturation"]
    assert not sat["reached"] and "one load measured (2)" in sat["reason"], sat
    assert "throughput still grew" not in err
    assert "prefix hits" not in err


def test_a_box_already_saturated_by_other_traffic_is_said_first_and_measures_nothing(
    sim, tmp_path, capsys
) -> None:
    """The seq-cap box with its own load on (8 running, 24 waiting), as in the demo: the
    sweep warns before its first step, a step in which nothing came back is not valid,
    the sweep stops there instead of stepping on through holds that measure nothing, and
    the verdict is the box's, not a load's (it read 0 req/s, 0 tok/s, valid, at every load
    and "saturation at 1 (0 tok/s), cause seq-cap")."""
    # Its own users ask for 256 tokens, not 512: a request still waits at least 5.4 s (the
    # model's time; a loaded box only slows it) behind the 24 queued, past the 4 s of warm-up
    # and hold, so nothing comes back in the hold; 512 had the sweep's probe and its step's
    # drain wait 11-25 s each.
    h = sim("seq-cap", config={"load": {"output_tokens": 256}}, load=True)
    out = tmp_path / "b"
    rc = quick_sweep(h.url, "1,2,4", out)
    err = capsys.readouterr().err
    assert rc == 0, err
    lines = err.splitlines()
    warn = next(i for i, line in enumerate(lines) if "already saturated by other traffic" in line)
    first_step = next(i for i, line in enumerate(lines) if line.startswith("step 0"))
    assert warn < first_step, err
    assert "waiting before the sweep sent anything" in lines[warn]
    r = json.loads((out / "sweep.json").read_text())
    assert r["before"]["saturated"] and r["before"]["waiting_p50"] >= 10, r["before"]
    assert r["stopped"] == "saturated-before"
    assert [s["concurrency"] for s in r["steps"]] == [1]
    s = r["steps"][0]
    assert s["requests_completed"] == 0 and not s["valid"]
    assert "nothing came back in the hold" in s["invalid_reason"]
    # The verdict: saturated before the sweep, by what the engine showed then; no load of the
    # sweep's named as the saturation point.
    sat = r["saturation"]
    assert sat["reached"] and sat["concurrency"] is None and sat["cause"] == "seq-cap", sat
    assert "other traffic already held the box at its limit" in sat["reason"]
    assert sat["reason"].endswith("nothing came back to the sweep"), sat
    assert lines[-2].startswith("saturated before the sweep, cause seq-cap: other traffic"), err
    report = (out / "report.html").read_text()
    assert "already saturated by other traffic" in report and "before the sweep" in report


def test_a_box_running_at_its_sequence_cap_is_saturated_before_the_sweep(
    sim, tmp_path, capsys
) -> None:
    """8 running of a reported cap of 8, none waiting (the demo's memory-bound box ran 256
    of 256): the next request waits for a slot, so the box is full before the sweep. Its
    requests still come back, as slots free: the steps are measurements, the verdict the box's."""
    h = sim("seq-cap", config=FIXTURES / "seq-cap-full.toml", load=True)
    out = tmp_path / "c"
    rc = quick_sweep(h.url, "1", out)
    err = capsys.readouterr().err
    assert rc == 0, err
    assert "warning: the box is already saturated by other traffic: 8 running (its cap 8)" in err
    # The warning and the verdict name one cause: the cap, whatever the engine read before.
    assert "before the sweep sent anything (seq-cap)" in err
    r = json.loads((out / "sweep.json").read_text())
    assert r["before"]["saturated"] and r["before"]["seq_cap"] == 8, r["before"]
    step = r["steps"][0]
    assert step["requests_completed"] > 0 and step["valid"], step
    sat = r["saturation"]
    assert sat["reached"] and sat["concurrency"] is None and sat["cause"] == "seq-cap", sat
    assert "(8 running of 8, 0 waiting)" in sat["reason"] and "not headroom" in sat["reason"]
    assert r["headroom_check"] is None and "headroom estimated" not in err
