"""The engine's physics on a virtual clock: queueing, caps, preemption, CPU and roofline timing."""

from __future__ import annotations

from typing import Any

import pytest

from simulator import Simulator
from simulator.box import StepRecord
from simulator.hardware import GPUS, MODELS, KernelModel, gpu_cost, step_work


def time_avg(records: list[StepRecord], field: str) -> float:
    total = sum(r.t_end - r.t_start for r in records)
    return sum(getattr(r, field) * (r.t_end - r.t_start) for r in records) / total


def ran(scenario: str, seconds: float, **engine: Any) -> Simulator:
    """The scenario's box, with the engine settings given, after seconds of virtual time."""
    sim = Simulator(scenario, engine=engine or None)
    sim.run_for(seconds)
    return sim


def busy_fraction(records: list[StepRecord]) -> float:
    return sum(r.gpu_busy_s for r in records) / (records[-1].t_end - records[0].t_start)


def test_littles_law_holds_in_steady_state_open_loop() -> None:
    # Poisson arrivals at 3 req/s into a box that is far from full.
    sim = Simulator(
        "starved", load_overrides={"rate": 3.0, "output_tokens": 400, "initial_requests": 0}
    )
    sim.run_for(300)
    t0, t1 = 60.0, 300.0
    window = sim.window(t0, t1)
    in_flight = time_avg(window, "running") + time_avg(window, "waiting")
    done = [r for r in sim.finished if t0 <= r.finished_at <= t1]
    throughput = len(done) / (t1 - t0)
    latency = sum(r.finished_at - r.arrival for r in done) / len(done)
    assert in_flight > 5  # a real queueing system, not a trivial one
    assert in_flight == pytest.approx(throughput * latency, rel=0.05)


def test_littles_law_closed_loop_in_flight_is_the_concurrency() -> None:
    sim = ran("seq-cap", 120)
    t0, t1 = 30.0, 120.0
    done = [r for r in sim.finished if t0 <= r.finished_at <= t1]
    throughput = len(done) / (t1 - t0)
    latency = sum(r.finished_at - r.arrival for r in done) / len(done)
    in_flight = time_avg(sim.window(t0, t1), "running") + time_avg(sim.window(t0, t1), "waiting")
    assert in_flight == pytest.approx(32, rel=0.02)
    assert throughput * latency == pytest.approx(in_flight, rel=0.05)


def test_running_never_exceeds_max_num_seqs_and_the_queue_grows_past_it() -> None:
    # Open loop at more than 8 sequences can serve: the queue has no steady state.
    sim = Simulator(
        "seq-cap",
        load_overrides={"mode": "open", "rate": 4.0, "concurrency": 0, "output_tokens": 600},
    )
    sim.run_for(120)
    assert max(r.running for r in sim.records) == 8
    waiting_at = {t: [r.waiting for r in sim.window(t - 10, t)] for t in (40, 80, 120)}
    means = [sum(w) / len(w) for w in waiting_at.values()]
    assert means[0] > 20
    assert means[0] < means[1] < means[2]


def test_the_same_load_queues_less_with_a_higher_cap() -> None:
    capped, roomy = ran("seq-cap", 60), ran("seq-cap", 60, max_num_seqs=64)
    assert time_avg(capped.window(20, 60), "waiting") > 20
    assert time_avg(roomy.window(20, 60), "waiting") == 0
    assert time_avg(roomy.window(20, 60), "running") == pytest.approx(32, abs=0.5)
    assert roomy.stats.generation_tokens > 2.5 * capped.stats.generation_tokens


def test_preemptions_appear_only_when_the_kv_cache_is_short() -> None:
    short, ample = ran("kv-cap", 60), ran("kv-cap", 60, num_blocks=4000)
    assert ample.stats.preemptions == 0
    assert max(r.kv_usage for r in ample.records) < 0.5
    assert short.stats.preemptions > 10
    # Preemption happens when the cache is (nearly) full, never with room to spare.
    usage_before = [
        prev.kv_usage for prev, r in zip(short.records, short.records[1:]) if r.preempted
    ]
    assert min(usage_before) > 0.9
    assert time_avg(short.window(20, 60), "waiting") > 5


def test_a_preempted_request_still_gets_all_its_tokens() -> None:
    sim = Simulator("kv-cap", load=False)
    reqs = [sim.submit(prompt_tokens=1000, max_tokens=1000) for _ in range(8)]
    sim.run_for(120)
    assert sim.stats.preemptions > 0
    assert all(r.finish_reason == "length" and r.output == 1000 for r in reqs)
    assert sim.core.free_blocks == sim.core.num_blocks


# Story B (DESIGN.md): 12 ms of GPU work and 28 ms of host work per step.
STORY_B = {"gpu": "a100-80gb", "cpu_step_s": 0.012, "cpu_per_seq_s": 0.0005}


def story_b(**engine: object) -> list[StepRecord]:
    sim = Simulator("cpu-bound", engine={**STORY_B, **engine})
    sim.run_for(40)
    return sim.window(10, 40)


def test_story_b_step_costs_are_12ms_gpu_and_28ms_cpu() -> None:
    w = story_b(overlap=False)
    gpu_ms = 1e3 * sum(r.gpu_busy_s for r in w) / len(w)
    cpu_ms = 1e3 * sum(r.host_cpu_s for r in w) / len(w)
    assert gpu_ms == pytest.approx(12, rel=0.1)
    assert cpu_ms == pytest.approx(28, rel=0.02)


def test_story_b_busy_fraction_without_overlap_is_30_percent() -> None:
    w = story_b(overlap=False)
    assert busy_fraction(w) == pytest.approx(0.30, abs=0.03)
    assert len(w) / 30 == pytest.approx(25, rel=0.1)  # steps per second


def test_story_b_busy_fraction_with_overlap_is_43_percent() -> None:
    assert busy_fraction(story_b(overlap=True)) == pytest.approx(0.43, abs=0.03)


def test_story_b_with_8ms_cpu_and_overlap_keeps_the_gpu_busy() -> None:
    # 8 ms of host work: 4 ms per step plus 32 sequences x 0.125 ms.
    w = story_b(overlap=True, cpu_step_s=0.004, cpu_per_seq_s=0.000125)
    assert 1e3 * sum(r.host_cpu_s for r in w) / len(w) == pytest.approx(8, rel=0.02)
    assert busy_fraction(w) > 0.97
    assert len(w) / 30 == pytest.approx(83, rel=0.1)


def test_decode_steps_are_memory_bound_and_big_prefill_chunks_compute_bound() -> None:
    gpu, model = GPUS["h100-sxm"], MODELS["llama-8b"]
    kernels = KernelModel(272, 2e-6, 5e-6, True, 0.7, 0.85)
    decode = gpu_cost(gpu, step_work(model, [(1, 1000)] * 64), kernels)
    prefill = gpu_cost(gpu, step_work(model, [(4096, 0)]), kernels)
    assert decode.memory_s > 2 * decode.compute_s
    assert prefill.compute_s > 5 * prefill.memory_s
    # The ridge: weights stream once per step, so arithmetic intensity grows with tokens.
    w = step_work(model, [(1, 0)] * 256)
    ridge = gpu.peak_flops / gpu.hbm_bytes_per_s
    assert (
        step_work(model, [(1, 0)] * 16).flops / step_work(model, [(1, 0)] * 16).read_bytes < ridge
    )
    assert w.flops / w.read_bytes < ridge < step_work(model, [(2048, 0)]).flops / w.read_bytes


def test_saturated_scenarios_split_on_the_roofline() -> None:
    compute, memory = ran("compute-bound", 30), ran("memory-bound", 30)
    c, m = compute.gpu_activity(5.0), memory.gpu_activity(5.0)
    assert (
        c.util > 0.95
        and c.sm_active > 0.9
        and c.tensor_active > 0.8
        and c.tensor_active > 3 * c.dram_active
    )
    assert (
        m.util > 0.95
        and m.sm_active > 0.9
        and m.dram_active > 0.8
        and m.dram_active > 1.5 * m.tensor_active
    )
    assert all(r.compute_bound for r in compute.window(10, 30))
    assert sum(r.compute_bound for r in memory.window(10, 30)) < 0.1 * len(memory.window(10, 30))


def test_launch_bound_gpu_is_busy_but_its_sms_are_idle_until_kernels_are_fused() -> None:
    eager = ran("launch-bound", 20)
    graphs = ran("launch-bound", 20, cuda_graphs=True)
    fused = ran("launch-bound", 20, cuda_graphs=True, kernels_per_step=150)
    e, g, f = (s.gpu_activity(5.0) for s in (eager, graphs, fused))
    assert e.util > 0.6
    assert e.sm_active < 0.2 * e.util
    # Graphs close the gaps between launches: a kernel always runs, SMs still mostly idle.
    assert g.util > e.util and g.sm_active < 0.2 * g.util
    assert graphs.stats.generation_tokens > 1.05 * eager.stats.generation_tokens
    # Fewer, fatter kernels fill the SMs and shorten the steps.
    assert f.sm_active / f.util > 4 * (e.sm_active / e.util)
    assert fused.stats.generation_tokens > 2 * eager.stats.generation_tokens


def test_token_budget_pins_iteration_tokens_and_raising_it_helps() -> None:
    capped, roomy = ran("token-cap", 60), ran("token-cap", 60, max_num_batched_tokens=512)
    w = capped.window(10, 60)
    pinned = sum(r.tokens == 128 for r in w) / len(w)
    assert pinned > 0.9
    assert max(r.tokens for r in w) == 128
    assert sum(r.prefill_tokens for r in w) > 0.8 * sum(r.tokens for r in w)  # prefill-heavy
    # Each 128-token step re-reads all the weights; 512 tokens amortise them over 4x the work.
    assert roomy.stats.success["length"] > 1.6 * capped.stats.success["length"]


def test_starved_box_has_room_by_littles_law() -> None:
    sim = ran("starved", 120)
    w = sim.window(20, 120)
    running = time_avg(w, "running")
    assert running == pytest.approx(10, rel=0.3)
    assert max(r.waiting for r in w) == 0
    assert running < 64 / 3


def test_idle_box_never_steps() -> None:
    sim = ran("idle", 10)
    assert sim.records == []
    assert sim.gpu_activity().util == 0


def test_scenarios_are_deterministic() -> None:
    assert ran("kv-cap", 20).records == ran("kv-cap", 20).records


def test_ignore_eos_is_honoured() -> None:
    sim = Simulator("idle", engine={"eos_probability": 0.05})
    stops = [sim.submit(10, 500, ignore_eos=False) for _ in range(20)]
    full = [sim.submit(10, 500, ignore_eos=True) for _ in range(5)]
    sim.run_for(30)
    assert all(r.finish_reason == "length" and r.output == 500 for r in full)
    assert all(r.finish_reason == "stop" and r.output < 500 for r in stops)
