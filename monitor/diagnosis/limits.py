"""Where each limit binds and how an engine step grows toward it: one model, read once a window.

The headroom figure (``engines[].headroom``: how much more load fits) and the what-if (what a
config change buys) are two readings of the one ``Load`` made here, so that a box's rate at
its limit is the same figure on the headroom line and in the what-if's "today" beside it.

The step model (StepModel): an engine step streams the weights once, however many sequences
ride on it, while the tensor work and the KV cache reads grow with them; a GEMM takes as long
as the slower of its bytes and its FLOPs, so the tensor work hides under the weights' stream
until it outgrows it. The parts' shares of a step are read from the GPU's tensor and DRAM
activity, the KV cache's part from the bytes it holds at the GPU's bandwidth; without a DRAM
reading the tensor work adds to the step, and without a GPU reading steps are assumed not to
lengthen. With the running sequences f times today's, throughput is f / growth(f) times
today's, and the GPU's knee is where one more doubling gains under headroom_knee_gain (the
rule a sweep's knee follows).

Each limit is a factor on today's running sequences: the sequence cap, the KV cache, the
token budget (prefill-heavy loads), the GPU's knee (compute or bandwidth) and the engine's
CPU.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from monitor.diagnosis import figures as fig
from monitor.diagnosis.step_cost import StepCost
from monitor.diagnosis.thresholds import Caps, Thresholds
from monitor.window.stats import EngineWindow, GpuWindow, HostWindow

# A cap this close behind the GPU's (soft) knee is what holds requests back there, and a
# knob is raised just past (by this much) the next limit behind it.
MARGIN = 1.2
GPU_LIMITS = ("compute", "bandwidth")

HEADROOM_ASSUMES = (
    "the same request mix (prompt and output lengths); KV use, engine CPU and tokens per step "
    "grow in proportion to the sequences running; an engine step takes the slower of its "
    "memory traffic (the weights, once a step, and the KV cache reads, which grow with the "
    "batch) and its tensor work (which grows with the batch), plus the rest, paid once a step, "
    "so each request's time grows with the load"
)


@dataclass(frozen=True, slots=True)
class StepModel:
    """What an engine step is made of now, as shares of its time (None: not read).

    ``compute``: the tensor work (grows with the batch); ``weights``: streaming the weights
    (once a step, however many ride on it); ``kv``: reading the KV cache (grows with the
    batch). A step takes as long as the slower of its memory traffic (the weights and the KV
    cache) and its tensor work, as a roofline has it (the GPU overlaps the two: the tensor
    work hides under the weights' stream until it outgrows it), plus the rest (launches,
    the host's part), paid once a step."""

    compute: float | None = None
    weights: float | None = None
    kv: float | None = None
    # Without GPU activity: the share of today's step that grows with its tokens, from the
    # line the agent fitted to earlier windows (step_cost.py); None: steps assumed flat.
    learned: StepCost | None = None
    per_token: float | None = None

    def growth(self, f: float) -> float:
        """How much longer a step takes with ``f`` times the sequences."""
        c, k = self.compute or 0.0, self.kv or 0.0
        if self.compute is None and self.per_token is not None:
            c = self.per_token
        if self.weights is None:
            # No DRAM reading: nothing says the tensor work hides under the weights' stream.
            return (1.0 - c - k) + (c + k) * f
        w = self.weights
        # Activity read as shares may overlap past the whole step: normalised so that today's
        # step is 1.
        rest = max(0.0, 1.0 - max(c, w + k))
        return (rest + max(c * f, w + k * f)) / (rest + max(c, w + k))

    def throughput(self, f: float) -> float:
        """Throughput with ``f`` times the sequences, over today's."""
        return f / self.growth(f)

    def knee(self, gain: float) -> tuple[str, float] | None:
        """Where one more doubling of the sequences gains under ``gain`` in throughput (the
        rule a sweep's knee follows), and which part of the step grows most there."""
        if not self.compute and not self.kv:
            return None
        f = 0.01
        while f < 1e5:
            if 2.0 * self.growth(f) / self.growth(2.0 * f) < 1.0 + gain:
                # Named by the part that sets the step on the doubling that gains too little:
                # the tensor work that outgrows the weights' stream is compute's knee.
                tensor = (self.compute or 0.0) * 2.0 * f
                memory = (self.weights or 0.0) + (self.kv or 0.0) * 2.0 * f
                return ("compute" if tensor >= memory else "bandwidth"), f
            f *= 1.02
        return None

    def words(self) -> str | None:
        shares = (
            ("tensor work", self.compute),
            ("the weights' stream", self.weights),
            ("KV reads", self.kv),
        )
        parts = [f"{name} {100 * share:.0f}%" for name, share in shares if share is not None]
        return ", ".join(parts) + " of a step" if parts else None


@dataclass(frozen=True, slots=True)
class Load:
    """What one window measured: the headroom figure's and the what-if's inputs (a tuner may
    build one from a sweep)."""

    running: float  # mean running sequences
    tokens_per_s: float | None  # generation tokens per second
    rate_rps: float | None  # completions per second
    # The factor on today's running sequences at which each limit binds (below 1: bound now).
    limits: Mapping[str, float]
    step: StepModel
    tokens_per_step: float | None = None
    prompt_tokens_mean: float | None = None
    step_s: float | None = None  # mean time a step (1 / steps a second)
    preemptions_per_s: float | None = None


def binding(limits: Mapping[str, float]) -> str:
    """The limit that binds first. The GPU's knee is soft (past it a doubling still gains a
    little) where a cap is hard: a cap within MARGIN behind the knee is what holds requests
    back there, and is named."""
    first = min(limits, key=lambda k: limits[k])
    if first in GPU_LIMITS:
        hard = [k for k in limits if k not in GPU_LIMITS and limits[k] <= limits[first] * MARGIN]
        if hard:
            return min(hard, key=lambda k: limits[k])
    return first


# -- the window's figures ------------------------------------------------------------


def cc_float(e: EngineWindow, key: str) -> float | None:
    """A number from the engine's cache_config_info (None where absent or not a number)."""
    v = dict(e.cache_config).get(key)
    try:
        return float(v) if v not in (None, "", "None") else None
    except ValueError:
        return None


def kv_read_time(
    gpus: Sequence[GpuWindow], e: EngineWindow, caps: Caps, th: Thresholds
) -> float | None:
    """The share of the engine's time spent reading the KV cache: each step reads the cache
    its sequences hold (KV used x the cache's bytes, from vLLM's cache_config_info) at the
    bandwidth the GPU reaches (its peak x headroom_dram_max). None where any is unknown."""
    kv_bytes, used = cc_float(e, "kv_cache_memory_bytes"), e.kv_cache_usage_mean
    peak, steps = fig.gpu_peak(gpus, caps), fig.steps_per_s(e)
    if not kv_bytes or used is None or peak is None or not steps:
        return None
    return used * kv_bytes / (peak.hbm_bytes_per_s * th.headroom_dram_max) * steps


def step_model(
    gpus: Sequence[GpuWindow],
    e: EngineWindow,
    caps: Caps,
    th: Thresholds,
    learned: StepCost | None = None,
) -> StepModel:
    """The step's parts from the GPU's activity: tensor-pipe activity against what it reads
    when compute alone fills the GPU, DRAM activity likewise, of which the KV cache's reads
    take the time kv_read_time says (or, without it, the share of bytes vLLM's estimated
    FLOPs and bytes leave to the KV cache: figures.kv_read_share, counted from
    headroom_kv_share_min on, within the weights estimate's error below); the weights the rest."""
    tensor, dram = fig.tensor_active_mean(gpus), fig.dram_active_mean(gpus)
    compute = None if tensor is None else min(tensor / th.headroom_tensor_max, 1.0)
    if compute is None and dram is None:
        tokens = e.iteration_tokens_mean
        if learned is None or not tokens:
            return StepModel()
        return StepModel(learned=learned, per_token=learned.token_share(tokens))
    if dram is None:
        return StepModel(compute=compute)
    memory = min(dram / th.headroom_dram_max, 1.0)
    kv_part = kv_read_time(gpus, e, caps, th)
    if kv_part is None:
        share = fig.kv_read_share(e, caps)
        ok = share is not None and share >= th.headroom_kv_share_min
        kv_part = memory * share if ok and share is not None else None
    kv_part = None if kv_part is None else min(kv_part, memory)
    return StepModel(compute=compute, weights=memory - (kv_part or 0.0), kv=kv_part)


def load_from_window(
    e: EngineWindow,
    gpus: Sequence[GpuWindow],
    host: HostWindow | None,
    cap: fig.SeqCap,
    budget: fig.TokenBudget,
    lit: fig.Littles,
    th: Thresholds,
    caps: Caps,
    learned: StepCost | None = None,
) -> Load | None:
    """Where each limit binds and the step's parts, from a window; None where nothing runs
    or no limit is known."""
    running = e.running_mean
    if not running or running <= 0:
        return None
    limits: dict[str, float] = {}
    if cap.value:
        limits["seq-cap"] = cap.value / running
    kv = e.kv_cache_usage_mean
    if kv is not None and kv > 0.001:
        # A KV cache barely used still fills at some load: its factor is large, not absent.
        limits["kv-cap"] = th.kv_full / kv
    step = step_model(gpus, e, caps, th, learned)
    knee = step.knee(th.headroom_knee_gain)
    if knee is not None:
        limits[knee[0]] = knee[1]
    thread, busy = fig.engine_thread_ratio(host), fig.busy_fraction(gpus)
    if thread is not None and busy is not None:
        # Much of an engine step's CPU is per step, not per sequence, and an engine loop that
        # polls (vLLM's CPU build spins near a full core at one stream) looks as busy as one
        # that works: the thread counts once it is busy while the GPU idles beside it, as in
        # CPU in the path, and also where the cpu-bound rule names the thread (a full core
        # beside a GPU short of busy): on the H200 llama.cpp's one thread at 96% of a core
        # beside 67% GPU busy held 8 slots, and 16 slots then ran 0.9x the tokens of 8, not
        # the 2x a slot count alone predicts.
        idle_beside = thread >= th.headroom_cpu_min and busy < th.util_low
        in_path = thread >= th.engine_thread_busy and busy < th.util_saturated
        if idle_beside or in_path:
            limits["cpu"] = 1.0 / thread
    if (
        budget.value
        and e.iteration_tokens_mean
        and budget.prefill_share is not None
        and budget.prefill_share >= th.prefill_share_min
    ):
        limits["token-cap"] = budget.value / e.iteration_tokens_mean
    if not limits:
        return None
    prompt_mean = None
    if e.prompt_tokens_per_s and lit.throughput_rps:
        prompt_mean = e.prompt_tokens_per_s / lit.throughput_rps
    return Load(
        running=running,
        tokens_per_s=e.generation_tokens_per_s,
        rate_rps=lit.throughput_rps,
        limits=limits,
        step=step,
        tokens_per_step=e.iteration_tokens_mean,
        prompt_tokens_mean=prompt_mean,
        step_s=1.0 / steps if (steps := fig.steps_per_s(e)) else None,
        preemptions_per_s=e.preemptions_per_s,
    )


def headroom(load: Load | None) -> dict[str, Any] | None:
    """By how much the load can grow before the first limit (``engines[].headroom``).

    The limit that binds first (``binding``); the concurrency there is the running sequences
    times its factor, and the request rate today's times the throughput the step model gives
    there (each request's time grown by the longer steps it rides on)."""
    if load is None:
        return None
    limit = binding(load.limits)
    factor = max(1.0, load.limits[limit])
    growth = load.step.growth(factor)
    rate = load.rate_rps
    return {
        "factor": round(factor, 3),
        "limit": limit,
        "concurrency_at_limit": round(load.running * factor, 2),
        "rate_at_limit_rps": None if rate is None else round(rate * factor / growth, 4),
        "latency_growth": round(growth, 3),
        "limits": {k: round(max(1.0, v), 3) for k, v in sorted(load.limits.items())},
        "assumes": HEADROOM_ASSUMES,
    }
