"""The simulated box on its virtual clock, read the way headroom reads a real one.

Each tick renders the box's vLLM and dcgm-exporter pages, parses them with headroom's own
readers and keeps the snapshot, so a window of minutes of the box's time costs a fraction
of a second and no sockets: the diagnosis's figures can be set beside what the same box
does at other loads (its throughput curve, its knee) exactly, without a machine's noise.
"""

from __future__ import annotations

from dataclasses import replace

from monitor.samples import Snapshot
from monitor.sources.dcgm_exporter import gpus_from_text
from monitor.sources.vllm import engines_from_text
from monitor.window import WindowStats, compute_window
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
