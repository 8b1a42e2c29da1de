"""Replay what llama.cpp's CUDA server on an H200 gave headroom, through today's code.

bench/gpu/llamacpp_h200.py ran ``llama-server --metrics --parallel 8`` (CUDA, sm_90, CUDA
graphs on) with a ~1B random Llama (Llama-3.2-1B's shape, f16, every layer on the GPU) on
a lent H200 and drove known loads with its own streaming clients. For each it recorded
(monitor/read/recording.py: NVML with GPM, the engine's /metrics page and the server's process,
1 s ticks, a 5 s window) and took ``headroom snapshot --json --pid``;
bench/gpu/llamacpp_fixtures.py copied them here, each tick's report trimmed to its verdicts.
bench/results/llamacpp_h200.md has the run's figures, energy included.

- decode: one stream decoding;
- slots: 16 streams on 8 slots: 8 run, the rest wait in llama.cpp's deferred queue;
- long: 8 streams of fresh ~3,300-token prompts (cache_prompt off), 4-token replies:
  28,700 prompt tokens/s, and the server's one thread, not prefill, is the limit;
- longcached: the same with one prompt repeated and llama.cpp's prompt cache on (its
  default): the prompt is never computed again, and the thread is all that works;
- lowload: one stream of the sweep's request shape (256 tokens in, 256 out);
- lowcap: lowload again, the snapshot told ``--max-num-seqs 8``;
- sweep-steps.jsonl: ``headroom sweep --concurrency 1,2,4,8,16,32 --nvml`` against it;
- sweep-p32-steps.jsonl, sweep-p32b-steps.jsonl: the same server with ``--parallel 32``,
  swept at 4,8,16,32,64 and at 8,12,16,20,24,32 streams.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from replay_support import replay_reports, without_bill

from loadgen.analysis import find_saturation, headroom_check, littles_law
from loadgen.plan import AdaptivePlan
from loadgen.schema import StepResult
from monitor.read.recording import read_recording

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "gpu" / "h200_llamacpp"
SLOTS = 8  # the server's --parallel
ENGINE = "engine:/@http://127.0.0.1:"  # the scope's start; the port was the run's own
# The verdicts, top first, that the GPU run gave once the window had filled (cause, scope).
EXPECTED: dict[str, list[tuple[str, str]]] = {
    # One stream leaves the engine's slots empty: it says send more load. Beside it the GPU
    # rule reads llama.cpp's batch-1 kernels (SMs 73% active, DRAM 34%, tensor 1%) as
    # non-tensor compute with low confidence; the sweep below got 2.9x the tokens at 8.
    "decode": [("starved", ENGINE), ("compute-bound", "gpu:0")],
    # 8 run, the rest wait: the slot count is the cap; the server's one thread is busy
    # while the GPU idles a third of each step, so CPU in the path comes second.
    "slots": [("seq-cap", ENGINE), ("cpu-bound", ENGINE)],
    # Prefill of fresh prompts keeps the GPU busy a third of the time (tensor 6%); the
    # server's thread, at a full core, is what limits.
    "long": [("cpu-bound", ENGINE), ("starved", ENGINE)],
    "longcached": [("cpu-bound", ENGINE), ("starved", ENGINE), ("idle", "gpu:0")],
    "lowload": [("starved", ENGINE), ("compute-bound", "gpu:0")],
    "lowcap": [("starved", ENGINE), ("compute-bound", "gpu:0")],
}
CASES = tuple(EXPECTED)


@cache
def replay(case: str) -> tuple[dict[str, Any], ...]:
    return replay_reports(FIXTURES / f"{case}.jsonl", 1.0)


def recorded(case: str) -> list[dict[str, Any]]:
    return [t.report for t in read_recording(FIXTURES / f"{case}.jsonl").ticks if t.report]


def snapshot(case: str) -> dict[str, Any]:
    return json.loads((FIXTURES / f"snapshot-{case}.json").read_text())


def said(report: dict[str, Any]) -> list[tuple[Any, ...]]:
    """What each rule concluded: its cause, scope, confidence and summary, and the lead's fix.

    The idle bill (issue 31) is said after what the run said. A verdict shown under the lead shows at most the lead's confidence and its fix defers
    to the lead's (display, after the run): the rule's own confidence is confidence_alone."""
    out = []
    for i, v in enumerate(report["verdicts"]):
        alone = v.get("confidence_alone")
        confidence = v["confidence"] if alone is None else alone
        # The lead's fix as the run gave it; a what-if clause (issue 29) may follow it now.
        fix = v["fix"].split("; ")[0] if i == 0 else ""
        out.append((v["cause"], v["scope"], confidence, without_bill(v["summary"]), fix))
    return out


def causes(report: dict[str, Any]) -> list[tuple[str, str]]:
    return [
        (v["cause"], ENGINE if v["scope"].startswith(ENGINE) else v["scope"])
        for v in report["verdicts"]
    ]


def evidence(verdict: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e["value"] for e in verdict["evidence"]}


@pytest.mark.parametrize("case", CASES)
def test_replay_gives_every_verdict_the_gpu_run_gave(case: str) -> None:
    live, again = recorded(case), replay(case)
    assert len(live) == len(again) >= 9
    assert [said(r) for r in again] == [said(r) for r in live]


@pytest.mark.parametrize("case", CASES)
def test_the_settled_windows_name_the_cases_cause(case: str) -> None:
    # The first tick has no GPM reading yet; from the third on the window holds two.
    reports = replay(case)[2:]
    want = EXPECTED[case]
    assert causes(reports[-1])[: len(want)] == want
    tops = [causes(r)[0] for r in reports]
    assert tops.count(want[0]) >= 0.7 * len(tops), tops


def test_slots_full_is_the_sequence_cap_at_the_slot_count() -> None:
    final = replay("slots")[-1]
    (e,) = final["engines"]
    assert e["flavour"] == "llamacpp" and e["running_max"] == SLOTS
    assert e["analysis"]["seq_cap"] == SLOTS and e["analysis"]["seq_cap_inferred"] is True
    v = final["verdicts"][0]
    assert v["cause"] == "seq-cap"
    assert f"raise --parallel above {SLOTS}" in v["fix"]
    assert evidence(v)["seq_cap"] == SLOTS
    # The snapshot the user ran during the same load says the same.
    snap = snapshot("slots")
    assert snap["verdicts"][0]["cause"] == "seq-cap"
    assert snap["engines"][0]["analysis"]["seq_cap"] == SLOTS
    assert snap["engines"][0]["headroom"]["limit"] == "seq-cap"


def test_single_stream_decode_keeps_the_sms_busy_at_a_third_of_the_bandwidth() -> None:
    gpu = replay("decode")[-1]["gpus"][0]
    # CUDA graphs: few launch gaps (util 85%), and kernels that fill the SMs: neither
    # launch-bound nor small kernels; 2 GB of weights a token at ~800 tokens/s reads a
    # third of HBM's bandwidth.
    assert gpu["util"] > 0.8 and gpu["sm_active"] > 0.7
    assert 0.3 < gpu["dram_active"] < 0.4 and gpu["tensor_active"] < 0.05
    all_causes = {c for r in replay("decode")[2:] for c, _ in causes(r)}
    assert not all_causes & {"launch-bound", "small-kernels", "memory-bound"}


def test_fresh_long_prompts_are_computed_and_the_servers_thread_limits() -> None:
    final = replay("long")[-1]
    (e,) = final["engines"]
    assert e["prompt_tokens_per_s"] > 20_000 and e["generation_tokens_per_s"] < 100
    v = final["verdicts"][0]
    assert v["cause"] == "cpu-bound"
    ev = evidence(v)
    assert 0.25 < ev["busy_fraction"] < 0.4 and ev["engine_thread_cpu_ratio"] >= 0.95
    assert final["gpus"][0]["tensor_active"] < 0.1


def test_a_cached_long_prompt_leaves_the_gpu_idle_behind_the_servers_thread() -> None:
    final = replay("longcached")[-1]
    v = final["verdicts"][0]
    assert v["cause"] == "cpu-bound"
    ev = evidence(v)
    assert ev["busy_fraction"] < 0.06 and ev["engine_thread_cpu_ratio"] >= 0.95


# --- the sweep ------------------------------------------------------------------------


@cache
def steps(name: str = "sweep-steps") -> tuple[StepResult, ...]:
    lines = (FIXTURES / f"{name}.jsonl").read_text().splitlines()
    return tuple(StepResult.model_validate_json(line) for line in lines)


def test_sweep_saturates_at_the_slot_count_by_the_sequence_cap() -> None:
    sat = find_saturation(list(steps()))
    assert sat.reached and sat.concurrency == SLOTS
    assert (sat.cause, sat.inferred_cap) == ("seq-cap", SLOTS)
    by = {s.concurrency: s for s in steps()}
    assert sorted(by) == [1, 2, 4, 8, 16, 32]
    assert all(s.requests_failed == 0 and s.valid for s in steps())
    # Below the slots nothing waits; past them the queue holds the rest.
    assert all((by[c].waiting_mean or 0) < 0.5 for c in (1, 2, 4, 8))
    assert by[16].waiting_p50 == 8 and by[32].waiting_p50 == 24
    assert by[16].output_tokens_per_s < 1.1 * by[8].output_tokens_per_s


def test_littles_law_holds_per_step_as_the_run_found() -> None:
    for s in steps():
        lxw = s.requests_per_s * s.e2e_mean_s
        assert lxw == pytest.approx(s.littles_law_in_flight, rel=1e-3)
        # The client's count and rate x time agree within 6% at every load (5.9% at 8,
        # where the hold's edges cut requests of 1 s each out of 12 s).
        assert lxw == pytest.approx(s.client_in_flight_mean, rel=0.06)
        dev, ok = littles_law(s.client_in_flight_mean, s.engine_in_flight_mean, lxw)
        assert dev == pytest.approx(s.littles_law_deviation, abs=1e-3)
        assert ok == s.littles_law_ok
    # At 8 streams on 8 slots llama.cpp's gauge read 7.1 running: a slot is empty between
    # one request's end and the next one's prompt, which the client counts as in flight.
    assert [s.littles_law_ok for s in steps()] == [True, True, True, False, True, True]


def test_the_low_load_headroom_finds_the_knee_once_told_the_slot_count() -> None:
    knee = find_saturation(list(steps())).concurrency
    # llama.cpp exports no slot count: the lone stream's window has no cap to reach.
    assert snapshot("lowload")["engines"][0]["headroom"] is None
    told = snapshot("lowcap")["engines"][0]
    assert told["analysis"]["seq_cap"] == SLOTS
    room = told["headroom"]
    assert room["limit"] == "seq-cap" and room["concurrency_at_limit"] == knee == SLOTS
    # The sweep's own check took its first step with an estimate (8 streams, where no cap
    # showed yet) and named compute far past the knee: the cap is what it could not see.
    check = headroom_check(list(steps()), find_saturation(list(steps())))
    assert check is not None and check.limit == "compute" and check.ratio > 100


def test_32_slots_saturate_at_32_past_a_flat_step_at_16() -> None:
    # llama.cpp's throughput is not concave in the batch on this GPU: 8 -> 16 streams gained
    # 8% (a knee at 8, cpu-bound, as the run's own sweep said), then 32 did 1.9x of 8. The
    # flat step is left out, and the knee is the 32 slots: at 64 streams 31.6 ran and 31.3
    # waited.
    sat = find_saturation(list(steps("sweep-p32-steps")))
    assert sat.reached and (sat.concurrency, sat.cause) == (32, "seq-cap"), sat.reason
    assert "a flat step left out: load 16 (1795 tok/s, +8% per doubling over 8" in sat.reason
    by = {s.concurrency: s.output_tokens_per_s for s in steps("sweep-p32-steps")}
    assert by[32] > 1.5 * by[16] and by[32] > 1.5 * by[8]


def test_an_adaptive_sweep_over_the_32_slots_goes_past_the_flat_step_to_them() -> None:
    # Replayed step by step: from 4 streams, 8 -> 16 gained 8% with nothing waiting, a knee
    # read at 8 by itself; the plan measures 32 before stopping there, 32 climbs out of the
    # flat step, and the sweep doubles on to 64, where the 32 slots queue the rest.
    recorded = {s.concurrency: s for s in steps("sweep-p32-steps")}
    plan, measured = AdaptivePlan(4, 64, refine=0), []
    while (x := plan.next(measured)) is not None:
        measured.append(recorded[int(x)])
    assert [s.concurrency for s in measured] == [4, 8, 16, 32, 64]
    assert find_saturation(measured[:3]).concurrency == 8  # where it would have stopped
    sat = find_saturation(measured)
    assert (sat.concurrency, sat.cause) == (32, "seq-cap"), sat.reason


def test_a_sag_that_32_streams_climb_out_of_is_no_knee() -> None:
    # The second 32-slot sweep fell from 1,884 tok/s at 16 streams to 1,276 at 20 and 1,600
    # at 24, then did 3,059 at 32. Read as a knee, the sag ended it at 12 (2,008 tok/s); the
    # dips are left out, the sweep is not saturated at 32, and an adaptive plan doubles on to
    # 64, where the first sweep met the 32 slots (seq-cap).
    measured = list(steps("sweep-p32b-steps"))
    sat = find_saturation(measured)
    assert not sat.reached and "(32)" in sat.reason and "a dip left out: load 20" in sat.reason
    assert AdaptivePlan(8, 64).next(measured) == 64
    by = {s.concurrency: s.output_tokens_per_s for s in measured}
    assert by[32] > 1.5 * by[16] and by[32] > 1.5 * by[12]


def test_the_what_if_says_more_slots_buy_nothing_where_the_servers_thread_binds() -> None:
    # 16 streams on 8 slots: the server's one thread at a full core beside the GPU 67% busy.
    # The run with 32 slots measured 1,795-1,884 tokens/s at 16 streams against 2,017 with 8
    # slots (bench/results/llamacpp_h200.md): doubling the slots bought nothing. A what-if
    # from the slot count alone promised 2x.
    settled = replay("slots")[-1]
    (e,) = settled["engines"]
    (w,) = e["whatif"]
    assert (w["flag"], w["current"], w["proposed"]) == ("--parallel", 8, 16)
    assert w["predicted"]["limit"] == "cpu"
    measured = 1884 / 2017
    assert 0.8 <= w["predicted"]["gain"] / measured <= 1.25
    (seq,) = [v for v in settled["verdicts"] if v["cause"] == "seq-cap"]
    assert "raise --parallel 8 -> 16 buys nothing: cpu binds first" in seq["fix"]
