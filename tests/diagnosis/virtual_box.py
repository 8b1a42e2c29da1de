"""The simulated box on its virtual clock, read the way headroom reads a real one.

Each tick renders the box's vLLM and dcgm-exporter pages, parses them with headroom's own
readers and keeps the snapshot, so a window of minutes of the box's time costs a fraction
of a second and no sockets: the diagnosis's figures can be set beside what the same box
does at other loads (its throughput curve, its knee) exactly, without a machine's noise.
"""

from __future__ import annotations

import math
from dataclasses import replace

from monitor.sources.dcgm_exporter import gpus_from_text
from monitor.sources.samples import Snapshot
from monitor.sources.vllm import engines_from_text
from monitor.window.full import compute_window
from monitor.window.stats import WindowStats
from simulator import Simulator
from simulator.config import SimConfig
from simulator.metrics import render_dcgm, render_vllm

URL = "http://sim.invalid:8000/metrics"
GPU_URL = "http://sim.invalid:8000/gpu-metrics"


def closed_loop(cfg: SimConfig, concurrency: int, *, warmup_s: float, window_s: float,
                tick_s: float = 1.0) -> WindowStats:  # fmt: skip
    """The window over ``window_s`` of the box's time under ``concurrency`` streams in a
    closed loop, after ``warmup_s`` for the batch to settle."""
    load = replace(cfg.load, mode="closed", concurrency=concurrency)
    sim = Simulator(replace(cfg, load=load), record=False)
    sim.run_for(warmup_s)
    snaps = []
    t_end = sim.now + window_s
    while True:
        engines, _ = engines_from_text(render_vllm(sim.core, sim.stats), URL)
        act = sim.gpu_activity(tick_s)
        page = render_dcgm(cfg.engine, sim.core.num_blocks, act, sim.gpu_energy_j())
        gpus, _ = gpus_from_text(page, GPU_URL)
        snaps.append(Snapshot(t=sim.now, wall=1_800_000_000.0 + sim.now, gpus=gpus,
                              engines=engines))  # fmt: skip
        if sim.now >= t_end:
            return compute_window(snaps)
        sim.run_for(tick_s)


# What a sweep's step reads: concurrency, tokens/s, mean running and waiting, the window.
Step = tuple[int, float, float, float, WindowStats]


def step_at(cfg: SimConfig, concurrency: int, *, warmup_s: float = 60.0,
            window_s: float = 40.0) -> Step:  # fmt: skip
    w = closed_loop(cfg, concurrency, warmup_s=warmup_s, window_s=window_s)
    e = w.engines[0]
    return (concurrency, e.generation_tokens_per_s or 0.0, e.running_mean or 0.0,
            e.waiting_mean or 0.0, w)  # fmt: skip


def sweep_knee(cfg: SimConfig, *, most: int = 512, gain: float = 0.1,
               **kw: float) -> tuple[Step, list[Step]]:  # fmt: skip
    """A closed-loop sweep on virtual time, as `headroom sweep` runs one: doubling from one
    stream until a doubling gains under ``gain`` in throughput, then bisecting between the
    last load that still gained and that one. The knee is the highest load that still gained:
    the box's saturation point. (Requests waiting alone do not end it: where prompts wait for
    room in the token budget they start to queue while throughput still grows a third per
    doubling; past a cap, throughput stops growing at once.)"""
    steps: dict[int, Step] = {}

    def at(c: int) -> Step:
        if c not in steps:
            steps[c] = step_at(cfg, c, **kw)
        return steps[c]

    def past(lo: Step, hi: Step) -> bool:
        doublings = math.log2(hi[0] / lo[0])
        return hi[1] < lo[1] * (1 + gain) ** doublings

    good, c = at(1), 2
    while c <= most:
        s = at(c)
        if past(good, s):
            break
        good, c = s, 2 * c
    else:
        return good, sorted(steps.values(), key=lambda s: s[0])
    lo, hi = good[0], c
    while hi - lo > 1:
        mid = (lo + hi) // 2
        s = at(mid)
        if past(good, s):
            hi = mid
        else:
            good, lo = s, mid
    return good, sorted(steps.values(), key=lambda s: s[0])


def blocking(cfg: SimConfig, concurrency: int, *, warmup_s: float = 60.0,
             window_s: float = 40.0) -> dict[str, float]:  # fmt: skip
    """What held requests back, from the simulated engine's own state (the truth a diagnosis
    is checked against): the share of the time each reason held the head of the queue out
    of a step, judged as the step is planned. seq-cap: every sequence slot taken; kv-cap: a
    sequence preempted, or slots and budget to spare yet no KV blocks; token-cap: the step
    used the whole token budget; where nothing waited, the step's own bound (compute or
    bandwidth)."""
    load = replace(cfg.load, mode="closed", concurrency=concurrency)
    sim = Simulator(replace(cfg, load=load), record=False)
    sim.run_for(warmup_s)
    e, core = cfg.engine, sim.core
    held: dict[str, float] = {}
    plan = core.schedule

    def schedule():  # noqa: ANN202 - the engine's own signature
        step = plan()
        if step is not None:
            if not core.waiting:
                why = "compute" if step.gpu.compute_bound else "bandwidth"
            elif len(core.running) >= e.max_num_seqs:
                why = "seq-cap"
            elif step.preempted:
                why = "kv-cap"
            elif step.tokens >= e.max_num_batched_tokens:
                why = "token-cap"
            else:
                why = "kv-cap"
            held[why] = held.get(why, 0.0) + step.duration_s
        return step

    core.schedule = schedule  # type: ignore[method-assign]
    sim.run_for(window_s)
    total = sum(held.values()) or 1.0
    return {k: round(v / total, 3) for k, v in sorted(held.items(), key=lambda kv: -kv[1])}
