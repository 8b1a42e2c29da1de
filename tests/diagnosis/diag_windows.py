"""Build windows the way the sampler would: a sequence of Snapshots through compute_window.

Engine counters and histograms are generated cumulatively from per-second rates, host
CPU from per-second shares, so the window's rates, means and histogram deltas come out
of monitor.window.full exactly as they would from live sources.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from monitor.sources import samples
from monitor.window.full import compute_window
from monitor.window.stats import E2E, ITERATION_TOKENS, PREFILL, QUEUE, TTFT, WindowStats

E2E_BOUNDS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 60.0, float("inf"))
ITER_BOUNDS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, float("inf"))

Series = float | Sequence[float] | None


def at(value: Series, i: int) -> float | None:
    if value is None or isinstance(value, (int, float)):
        return value
    return value[i]


@dataclass
class HistAcc:
    bounds: tuple[float, ...]
    counts: list[float] = field(default_factory=list)
    total: float = 0.0
    n: float = 0.0

    def __post_init__(self) -> None:
        self.counts = [0.0] * len(self.bounds)

    def observe(self, value: float, count: float) -> None:
        for i, le in enumerate(self.bounds):
            if value <= le:
                self.counts[i] += count
        self.total += value * count
        self.n += count

    def freeze(self) -> samples.Histogram:
        return samples.Histogram(tuple(zip(self.bounds, self.counts)), self.total, self.n)


def gpu(
    util: float,
    sm: float | None = None,
    tensor: float | None = None,
    dram: float | None = None,
    *,
    index: int = 0,
    name: str = "NVIDIA H200",
    occupancy: float | None = None,
    pcie_rx: float | None = None,
    pcie_tx: float | None = None,
    link: tuple[int, int] | None = None,  # (PCIe generation, lanes)
    driver_util: float | None = None,
) -> samples.GpuSample:
    return samples.GpuSample(
        index=index,
        uuid=f"GPU-{index}",
        name=name,
        source="nvml",
        util=util,
        sm_active=sm,
        sm_occupancy=occupancy,
        tensor_active=tensor,
        dram_active=dram,
        pcie_rx_bytes_per_s=pcie_rx,
        pcie_tx_bytes_per_s=pcie_tx,
        pcie_link_gen=link[0] if link else None,
        pcie_link_width=link[1] if link else None,
        driver_util=driver_util,
    )


def engine_samples(
    n: int,
    dt: float = 1.0,
    *,
    running: Series = 0.0,
    waiting: Series = 0.0,
    waiting_capacity: Series = None,
    kv: Series = None,
    rps: float = 0.0,
    e2e_s: float | None = None,
    queue_s: float | None = None,
    ttft_s: float | None = None,
    prefill_s: float | None = None,
    steps_per_s: float | None = None,
    tokens_per_step: float = 1.0,
    prompt_tps: float | None = None,
    gen_tps: float | None = None,
    preempt_per_s: float = 0.0,
    flops_per_s: float | None = None,
    bytes_per_s: float | None = None,
    url: str = "http://127.0.0.1:8000/metrics",
    reported_seqs: int | None = None,
    cache_config: tuple[tuple[str, str], ...] = (),
) -> list[samples.EngineSample]:
    e2e, queue, iters = HistAcc(E2E_BOUNDS), HistAcc(E2E_BOUNDS), HistAcc(ITER_BOUNDS)
    ttft, prefill = HistAcc(E2E_BOUNDS), HistAcc(E2E_BOUNDS)
    out = []
    done = preempt = prompt = gen = flops = byts = 0.0
    for i in range(n):
        if i > 0:
            done += rps * dt
            preempt += preempt_per_s * dt
            prompt += (prompt_tps or 0.0) * dt
            gen += (gen_tps or 0.0) * dt
            flops += (flops_per_s or 0.0) * dt
            byts += (bytes_per_s or 0.0) * dt
            if e2e_s is not None:
                e2e.observe(e2e_s, rps * dt)
            if queue_s is not None:
                queue.observe(queue_s, rps * dt)
            if ttft_s is not None:
                ttft.observe(ttft_s, rps * dt)
            if prefill_s is not None:
                prefill.observe(prefill_s, rps * dt)
            if steps_per_s is not None:
                iters.observe(tokens_per_step, steps_per_s * dt)
        hists = []
        if e2e_s is not None:
            hists.append((E2E, e2e.freeze()))
        if queue_s is not None:
            hists.append((QUEUE, queue.freeze()))
        if ttft_s is not None:
            hists.append((TTFT, ttft.freeze()))
        if prefill_s is not None:
            hists.append((PREFILL, prefill.freeze()))
        if steps_per_s is not None:
            hists.append((ITERATION_TOKENS, iters.freeze()))
        out.append(
            samples.EngineSample(
                url=url,
                model_name="m",
                engine="0",
                running=at(running, i),
                waiting=at(waiting, i),
                waiting_capacity=at(waiting_capacity, i),
                kv_cache_usage=at(kv, i),
                preemptions_total=preempt,
                request_success_total=done,
                prompt_tokens_total=prompt if prompt_tps is not None else None,
                generation_tokens_total=gen if gen_tps is not None else None,
                estimated_flops_total=flops if flops_per_s is not None else None,
                estimated_read_bytes_total=byts if bytes_per_s is not None else None,
                histograms=tuple(hists),
                reported_max_num_seqs=reported_seqs,
                reported_caps_origin="server_info" if reported_seqs is not None else "",
                cache_config=cache_config,
            )
        )
    return out


def host_samples(
    n: int,
    dt: float = 1.0,
    *,
    thread: float = 0.2,
    busy: float = 0.3,
    cpu_count: int = 16,
    thread_name: str = "EngineCore_0",
) -> list[samples.HostSample]:
    out = []
    for i in range(n):
        t = i * dt
        out.append(
            samples.HostSample(
                cpu_count=cpu_count,
                cpu_total_seconds=cpu_count * t,
                cpu_idle_seconds=cpu_count * t * (1 - busy),
                processes=(
                    samples.ProcessCpu(
                        pid=100,
                        name="vllm",
                        cpu_seconds=(thread + 0.1) * t,
                        threads=(
                            samples.ThreadCpu(101, thread_name, thread * t),
                            samples.ThreadCpu(102, "api", 0.1 * t),
                        ),
                    ),
                ),
            )
        )
    return out


def make_window(
    n: int = 6,
    dt: float = 1.0,
    *,
    gpus: Sequence[samples.GpuSample] | Sequence[Sequence[samples.GpuSample]] | None = None,
    engine: Mapping[str, Any] | None = None,
    host: Mapping[str, Any] | None = None,
    load: Mapping[str, float] | None = None,
    wall0: float = 1_800_000_000.0,
) -> WindowStats:
    """``gpus`` is one tuple of GpuSamples for every tick, or one tuple per tick."""
    engines = engine_samples(n, dt, **engine) if engine is not None else None
    hosts = host_samples(n, dt, **host) if host is not None else None
    snaps = []
    for i in range(n):
        if not gpus:
            g: tuple[samples.GpuSample, ...] = ()
        elif isinstance(gpus[0], samples.GpuSample):
            g = tuple(gpus)  # type: ignore[arg-type]
        else:
            g = tuple(gpus[i])  # type: ignore[arg-type]
        snaps.append(
            samples.Snapshot(
                t=100.0 + i * dt,
                wall=wall0 + i * dt,
                gpus=g,
                engines=(engines[i],) if engines is not None else (),
                host=hosts[i] if hosts is not None else None,
                load=tuple((load or {}).items()),
            )
        )
    return compute_window(snaps)


# Light decode load as the simulator's starved box reads it: steps run back to back, each
# streams the weights for a small batch: duty cycle ~100%, DRAM busy, tensor cores idle.
LIGHT_GPU = gpu(1.0, 0.89, 0.05, 0.82)
# Light load (DESIGN.md's story A): 10 of 64 slots, 1 req/s of 10 s requests.
LIGHT = dict(running=10, rps=1.0, e2e_s=10.0, queue_s=0.0)
# vLLM's estimated FLOPs and bytes for the light load's steps (300 tokens/s of an 8B model,
# 30 steps a second): the weights are 70% of the bytes a step reads, the KV cache of 10
# sequences 30%, so the steps lengthen as sequences are added.
KV_READS = dict(gen_tps=300.0, flops_per_s=2 * 8e9 * 300, bytes_per_s=16e9 * 30 / 0.7)


def story_a_window(gpu: samples.GpuSample = LIGHT_GPU, **engine: Any) -> WindowStats:
    """Story A over 20 s of window (Little's law is judged over at least one request
    lifetime): steps of 10 tokens, 30 a second, with their KV reads; ``engine`` adds to it."""
    steps = dict(steps_per_s=30, tokens_per_step=10, **KV_READS)
    return make_window(21, gpus=[gpu], engine={**LIGHT, **steps, **engine})
