"""Every number the diagnosis compares against, in one object, and what the user tells us.

Defaults are DESIGN.md's starting points, each defended by a test on synthetic
windows and on the real H200 and vLLM readings (tests/diagnosis/). Ratios are
0-1. ``configs/headroom.example.toml`` lists every field with its default.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from monitor.core.configfile import read_settings_file
from monitor.core.errors import ConfigError


@dataclass(frozen=True)
class Thresholds:
    # --- GPU activity -------------------------------------------------------
    # Duty cycle below which a GPU counts as idle (NVML's util reads 0-1% at rest).
    util_idle: float = 0.05
    # With requests running in every sample, a duty cycle below this means the GPU idles
    # between back-to-back engine steps: host work is in the path (Story B reads 0.30).
    util_low: float = 0.5
    # Duty cycle at or above which the GPU is saturated; CPU-in-path needs it below. (The
    # H200 read 1.00 for matmul and copy; the simulator's memory-bound box, real-time on two
    # loaded cores, reads 0.85 / SM 0.80: the margin keeps it saturated.)
    util_saturated: float = 0.8
    # SM active at or above which the SMs are saturated (with util_saturated).
    sm_active_high: float = 0.7
    # Launch-bound: util at least this ...  (the H200 tiny-kernel loop read util 0.23-0.29,
    # so DESIGN's "util high" cannot mean > 0.5 here)
    launch_util_min: float = 0.2
    # ... while SM active is below this share of util (the tiny loop: 0.0004 / 0.27).
    launch_sm_ratio: float = 0.3
    # ... and util below this: launch-bound needs gaps between kernels that a faster launcher
    # would fill. The H200's small step replayed as a CUDA graph read util 0.99 with SM
    # active 0.285 (no gaps left: its kernels are too small, not too slowly launched); the
    # same step launched eagerly read 0.26, the simulator's eager engine 0.5-0.82.
    launch_util_max: float = 0.95
    # Transfer-bound: the busier PCIe direction at least this share of the link's peak ...
    # (the H200's pinned 256 MiB host-to-device loop read 53-54 GB/s of Gen5 x16's 63)
    transfer_share_min: float = 0.5
    # ... while SM active stays below this (that loop: 0.024, one small kernel per copy).
    transfer_sm_max: float = 0.2
    # Contended: processes outside the engine's tree take at least this share of the GPU's
    # time with kernels on the SMs (NVML's per-process samples) while the engine holds it.
    contended_sm_min: float = 0.1
    # The headroom figure: the tensor-pipe activity taken as compute's ceiling (a bf16
    # matmul loop on the H200 read 0.93-0.94: nothing real reaches 1.0).
    headroom_tensor_max: float = 0.9
    # ... and the DRAM activity taken as memory bandwidth's (a copy loop on the H200 read 0.89)
    headroom_dram_max: float = 0.9
    # ... counted once the KV cache is this share of the bytes a step reads or more: the
    # weights are estimated from FLOPs per token, which attention's FLOPs inflate by up to a
    # tenth at long contexts.
    headroom_kv_share_min: float = 0.1
    # ... and puts compute's limit where one more doubling of the load would gain less than
    # this share of throughput: the rule a sweep's knee follows by default, so the estimate
    # and the sweep it is checked against name the same point.
    headroom_knee_gain: float = 0.1
    # A part of the engine's time to first token (queueing, prefill) at or above this share
    # of it dominates: evidence for the cap that makes it (seq-cap, token-cap).
    ttft_part_dominant: float = 0.5
    # ... and counts the engine thread as a limit from this share of a core on (much of a
    # step's CPU is per step, not per sequence: the simulator's loop read 0.24 at 1 stream).
    headroom_cpu_min: float = 0.5
    # Tensor-pipe active at or above which a saturated GPU is compute-bound (matmul read 0.94).
    tensor_high: float = 0.5
    # DRAM bandwidth active at or above which a saturated GPU is memory-bound (copy read 0.89).
    dram_high: float = 0.5
    # A busy GPU (util_saturated) whose SMs are not saturated is still memory-bound, with
    # less confidence, when DRAM bandwidth active is at least this ... (the H200's batch-1
    # decode read 0.55 with SM 0.58 and tensor 0.02: the weights streamed every token)
    dram_dominant_min: float = 0.4
    # ... and at least this many times the tensor-pipe activity (that decode: 24x; the
    # matmul 0.18x, the batch-64 decode 5.3x).
    dram_tensor_ratio: float = 3.0
    # --- Several GPUs: collectives (comm-bound) ---------------------------------
    # NVLink traffic (transmit + receive) per GPU at or above this share of the GPU's
    # NVLink peak (peaks.py: H100/H200 SXM 900 GB/s both ways) counts as high. A loop of
    # large all-reduces should move most of the peak; the simulator's tensor-parallel step,
    # half of it in all-reduces, reads ~40%; a single GPU reads 0.
    nvlink_share_min: float = 0.2
    # ... or, for a GPU whose NVLink peak is unknown, at or above this many bytes/s.
    nvlink_bytes_min: float = 100e9
    # SM active may differ across the engine's GPUs by at most this (max - min) for them to
    # "fall in step": tensor-parallel ranks wait on each other at every all-reduce.
    comm_spread_max: float = 0.15
    # --- Engine -------------------------------------------------------------
    # Requests completed per second below which an engine with nothing running is idle.
    idle_requests_per_s: float = 0.01
    # Mean waiting requests above which a queue exists (Q > 0.5 on average).
    waiting_min: float = 0.5
    # Share of samples with waiting > 0 for the queue to count as sustained.
    waiting_sustained: float = 0.6
    # Running within this fraction below the cap counts as "at the cap".
    plateau_tolerance: float = 0.1
    # Share of queued samples that must sit at the plateau for a cap to be inferred.
    plateau_share: float = 0.8
    # Share of queued samples at the top itself for a reading one sequence below it to
    # count as at the cap too (a finish not yet followed by an admission).
    plateau_top_share: float = 0.5
    # Queued samples needed before a cap is inferred (a snapshot over 2 s has ~3).
    plateau_min_samples: int = 2
    # Starved when mean running is at most this share of the sequence cap.
    starved_running_share: float = 0.5
    # Assumed sequence cap when neither given nor inferable (vLLM's usual default); said so.
    assumed_max_num_seqs: int = 256
    # KV cache usage at or above which the cache is full.
    kv_full: float = 0.9
    # Preemptions per second above which the KV cache is forcing requests out.
    preemptions_per_s_min: float = 0.0
    # Token budget: share of steps at the budget for it to count as pinned.
    token_pinned_share: float = 0.5
    # A step within this fraction below the budget counts as filling it.
    token_fill: float = 0.9
    # Share of processed tokens that are prompt tokens for a "prefill-heavy" load.
    prefill_share_min: float = 0.5
    # Smallest inferred token budget (with prefill_share_min, keeps decode-only steps of
    # R tokens from looking like one; the simulator's token-cap runs at 128).
    token_budget_infer_min: int = 64
    # --- CPU in the path ----------------------------------------------------
    # Busiest engine thread (vLLM's engine-core loop) at or above this share of one core.
    engine_thread_busy: float = 0.85
    # Serial CPU then GPU: the thread's share of a core at least this, with thread + GPU busy
    # share at least engine_thread_busy (Story B unoverlapped: 0.7 + 0.3).
    cpu_step_share: float = 0.5
    # Whole-host CPU busy share at or above which the host is saturated.
    host_cpu_saturated: float = 0.9
    # --- Client -------------------------------------------------------------
    # Load generator CPU (share of one core) above which it is the bottleneck.
    client_cpu_saturated: float = 0.9
    # The generator is short of its target when it reaches less than (1 - this) of it.
    client_shortfall: float = 0.1
    # --- Little's law -------------------------------------------------------
    # Relative disagreement between measured and predicted in-flight still called consistent.
    littles_tolerance: float = 0.15
    # Completions in the window below which Little's law is not judged (rate and mean
    # latency of one or two requests say nothing). A disagreement must also pass the
    # tolerance plus 1/sqrt(completions), the sampling error of both estimates.
    littles_min_completions: int = 3
    # --- Reporting ----------------------------------------------------------
    # Verdicts below this confidence sort after every confident one.
    weak_confidence: float = 0.5
    # Windows a cause must hold before it is reported as stable.
    enter_windows: int = 2
    # Windows a stable cause must be absent before it clears.
    clear_windows: int = 2
    # Confidence factor for a cause seen but not yet held for enter_windows.
    pending_confidence_factor: float = 0.6

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type == "int":
                if value < 1 and f.name.endswith(("_windows", "_samples", "_seqs")):
                    raise ConfigError(f"thresholds.{f.name}: must be at least 1, got {value}")
            elif value < 0:
                raise ConfigError(f"thresholds.{f.name}: must not be negative, got {value}")


@dataclass(frozen=True)
class Caps:
    """What the user knows about the engine: vLLM does not export these."""

    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    # A key of GPU_PEAKS ("H200"), overriding the match on the GPU's name.
    gpu: str | None = None
    # Precision the roofline's peak FLOP/s is taken at: "bf16" or "fp8".
    precision: str = "bf16"


_INT_FIELDS = {"int"}
_FLOAT_FIELDS = {"float"}


def _coerce(section: str, name: str, type_name: str, value: Any) -> Any:
    optional = "None" in type_name
    base = type_name.replace(" | None", "")
    if value is None and optional:
        return None
    if base in _INT_FIELDS:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{section}.{name}: expected an integer, got {value!r}")
        return value
    if base in _FLOAT_FIELDS:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{section}.{name}: expected a number, got {value!r}")
        return float(value)
    if base == "str":
        if not isinstance(value, str):
            raise ConfigError(f"{section}.{name}: expected a string, got {value!r}")
        return value
    raise ConfigError(f"{section}.{name}: unsupported setting")  # pragma: no cover


def _read(path: str | Path) -> Mapping[str, Any]:
    return read_settings_file(path, str(Path(path)))


def _section(
    data: Mapping[str, Any], name: str, path: str | Path, top_level: bool
) -> Mapping[str, Any]:
    if name in data:
        section = data[name]
        if not isinstance(section, Mapping):
            raise ConfigError(f"{path}: {name}: expected a table")
        return section
    if not top_level:
        return {}
    # A file holding only thresholds may list them at the top level, beside other tables.
    return {k: v for k, v in data.items() if not isinstance(v, Mapping)}


def _build(cls: type, section: Mapping[str, Any], label: str) -> Any:
    known = {f.name: str(f.type) for f in fields(cls)}
    values: dict[str, Any] = {}
    for key, value in section.items():
        if key not in known:
            raise ConfigError(f"{label}.{key}: unknown key")
        values[key] = _coerce(label, key, known[key], value)
    return dataclasses.replace(cls(), **values)


def load_thresholds(path: str | Path) -> Thresholds:
    """Thresholds from a TOML or YAML file: its ``[thresholds]`` table (or top level).

    Unset keys keep their defaults; an unknown key or a wrong type is a
    ConfigError naming the key.
    """
    data = _read(path)
    return _build(Thresholds, _section(data, "thresholds", path, top_level=True), "thresholds")


def load_caps(path: str | Path) -> Caps:
    """Caps from the ``[caps]`` table of a TOML or YAML file (absent: no caps)."""
    from monitor.diagnosis.peaks import peak_for_key

    caps = _build(Caps, _section(_read(path), "caps", path, top_level=False), "caps")
    if caps.gpu is not None and peak_for_key(caps.gpu) is None:
        raise ConfigError(f"caps.gpu: unknown GPU {caps.gpu!r} (see GPU_PEAKS)")
    if caps.precision not in ("bf16", "fp8"):
        raise ConfigError(f"caps.precision: expected 'bf16' or 'fp8', got {caps.precision!r}")
    for name in ("max_num_seqs", "max_num_batched_tokens"):
        value = getattr(caps, name)
        if value is not None and value < 1:
            raise ConfigError(f"caps.{name}: must be at least 1, got {value}")
    return caps
