"""The simulator's settings: the engine, the built-in load, and loading them from TOML or YAML.

A config file names a base scenario and overrides any key of it::

    scenario = "seq-cap"
    [engine]
    max_num_seqs = 16
    [load]
    concurrency = 48

Unknown keys and wrong types are refused with one line naming the key.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from simulator.errors import SimConfigError
from simulator.hardware import GPUS, MODELS, GiB, GpuSpec, KernelModel, ModelSpec


@dataclass(frozen=True)
class EngineConfig:
    gpu: str = "h100-sxm"
    model: str = "llama-8b"
    # Tensor-parallel ranks: each GPU holds 1/tp of the weights and KV cache and
    # all-reduces the activations twice per layer over NVLink.
    tensor_parallel_size: int = 1
    served_model_name: str = ""  # empty: the model preset's name
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    chunked_prefill: bool = True
    block_size: int = 16
    # Automatic prefix caching (on by default in vLLM V1): a prompt's leading blocks that an
    # earlier prompt computed are not prefilled again.
    prefix_caching: bool = True
    num_blocks: int = 0  # 0: what gpu_memory_utilization leaves after the weights
    gpu_memory_utilization: float = 0.9
    max_model_len: int = 8192
    # Host CPU per step: scheduling, then per running sequence sampling,
    # detokenising and streaming, then input preparation per scheduled token.
    cpu_step_s: float = 0.0015
    cpu_per_seq_s: float = 0.00002
    cpu_per_token_s: float = 0.0000002
    overlap: bool = True  # async scheduling: host work for step n+1 runs during step n
    cuda_graphs: bool = True
    kernels_per_step: int = 0  # 0: 8 per layer + 16
    kernel_fixed_s: float = 0.000002
    launch_overhead_s: float = 0.000005
    compute_efficiency: float = 0.7
    memory_efficiency: float = 0.85
    # Chance per token that a request without ignore_eos ends ("stop").
    eos_probability: float = 0.001
    # Share of the simulated host CPU time really burnt; the rest is slept.
    cpu_scale: float = 1.0
    gpu_sample_period_s: float = 1.0
    seed: int = 0

    @property
    def gpu_spec(self) -> GpuSpec:
        return GPUS[self.gpu]

    @property
    def model_spec(self) -> ModelSpec:
        return MODELS[self.model]

    @property
    def model_name(self) -> str:
        return self.served_model_name or self.model_spec.served_name

    @property
    def kernel_model(self) -> KernelModel:
        kernels = self.kernels_per_step or 8 * self.model_spec.num_layers + 16
        return KernelModel(
            kernels_per_step=kernels, **{name: getattr(self, name) for name in _KERNEL_KNOBS}
        )

    @property
    def total_blocks(self) -> int:
        if self.num_blocks:
            return self.num_blocks
        gpu, model = self.gpu_spec, self.model_spec
        # vLLM keeps ~1 GiB for activations and the CUDA context beside the weights.
        tp = self.tensor_parallel_size
        free = gpu.memory_bytes * self.gpu_memory_utilization - model.weight_bytes / tp - GiB
        return max(1, int(free // (self.block_size * model.kv_bytes_per_token / tp)))


# The engine settings a KernelModel takes as they are, by the same names.
_KERNEL_KNOBS = (
    "kernel_fixed_s", "launch_overhead_s", "cuda_graphs", "compute_efficiency",
    "memory_efficiency",
)  # fmt: skip


@dataclass(frozen=True)
class LoadConfig:
    mode: str = "none"  # none | closed | open
    concurrency: int = 0  # closed loop: requests kept in flight
    rate: float = 0.0  # open loop: Poisson arrivals per second
    prompt_tokens: int = 256
    prompt_jitter: float = 0.0  # uniform +- this share
    output_tokens: int = 256
    output_jitter: float = 0.5
    # Open loop: requests already in flight at start, part-way through their output,
    # so a light steady state shows at once rather than after one request lifetime.
    initial_requests: int = 0
    seed: int = 1


@dataclass(frozen=True)
class SimConfig:
    scenario: str = "custom"
    summary: str = ""
    engine: EngineConfig = field(default_factory=EngineConfig)
    load: LoadConfig = field(default_factory=LoadConfig)


def _coerce(where: str, value: Any, annotation: str) -> Any:
    kind = annotation.split("|")[0].strip()
    if kind == "bool":
        if isinstance(value, bool):
            return value
    elif kind == "int":
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif kind == "float":
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
    elif kind == "str":
        if isinstance(value, str):
            return value
    raise SimConfigError(f"{where} must be a {kind}, got {value!r}")


def _apply(obj: Any, section: str, values: Any, source: str) -> Any:
    if not isinstance(values, dict):
        raise SimConfigError(f"{source}: [{section}] must be a table of keys")
    known = {f.name: f for f in dataclasses.fields(obj)}
    changes = {}
    for key, value in values.items():
        if key not in known:
            raise SimConfigError(
                f"{source}: unknown key {section}.{key} (known: {', '.join(sorted(known))})"
            )
        changes[key] = _coerce(f"{source}: {section}.{key}", value, str(known[key].type))
    return dataclasses.replace(obj, **changes)


def validate(cfg: SimConfig, source: str = "config") -> SimConfig:
    e, ld = cfg.engine, cfg.load

    def need(ok: bool, what: str) -> None:
        if not ok:
            raise SimConfigError(f"{source}: {what}")

    need(e.gpu in GPUS, f"engine.gpu {e.gpu!r} is not a preset (one of: {', '.join(GPUS)})")
    need(
        e.model in MODELS, f"engine.model {e.model!r} is not a preset (one of: {', '.join(MODELS)})"
    )
    for name in ("max_num_seqs", "max_num_batched_tokens", "block_size", "max_model_len"):
        need(getattr(e, name) >= 1, f"engine.{name} must be >= 1, got {getattr(e, name)}")
    need(e.num_blocks >= 0, "engine.num_blocks must be >= 0 (0: from GPU memory)")
    need(
        e.tensor_parallel_size in (1, 2, 4, 8),
        f"engine.tensor_parallel_size must be 1, 2, 4 or 8, got {e.tensor_parallel_size}",
    )
    need(e.kernels_per_step >= 0, "engine.kernels_per_step must be >= 0 (0: from the model)")
    need(0 < e.gpu_memory_utilization <= 1, "engine.gpu_memory_utilization must be in (0, 1]")
    need(0 < e.compute_efficiency <= 1, "engine.compute_efficiency must be in (0, 1]")
    need(0 < e.memory_efficiency <= 1, "engine.memory_efficiency must be in (0, 1]")
    need(0 <= e.eos_probability < 1, "engine.eos_probability must be in [0, 1)")
    need(0 <= e.cpu_scale <= 1, "engine.cpu_scale must be in [0, 1]")
    need(e.gpu_sample_period_s > 0, "engine.gpu_sample_period_s must be > 0")
    for name in (
        "cpu_step_s",
        "cpu_per_seq_s",
        "cpu_per_token_s",
        "kernel_fixed_s",
        "launch_overhead_s",
    ):
        need(getattr(e, name) >= 0, f"engine.{name} must be >= 0")
    need(
        e.chunked_prefill or e.max_num_batched_tokens >= e.max_model_len,
        "engine.max_num_batched_tokens must be >= max_model_len without chunked prefill",
    )
    need(
        e.total_blocks * e.block_size >= e.max_model_len,
        f"engine: the KV cache ({e.total_blocks} blocks of {e.block_size}) cannot hold one "
        f"request of max_model_len {e.max_model_len}",
    )
    need(
        ld.mode in ("none", "closed", "open"),
        f"load.mode must be none, closed or open, got {ld.mode!r}",
    )
    need(ld.concurrency >= 0 and ld.rate >= 0, "load.concurrency and load.rate must be >= 0")
    need(ld.prompt_tokens >= 1 and ld.output_tokens >= 1, "load token counts must be >= 1")
    need(0 <= ld.prompt_jitter < 1 and 0 <= ld.output_jitter < 1, "load jitters must be in [0, 1)")
    need(ld.initial_requests >= 0, "load.initial_requests must be >= 0")
    longest = math.ceil(ld.prompt_tokens * (1 + ld.prompt_jitter)) + math.ceil(
        ld.output_tokens * (1 + ld.output_jitter)
    )
    need(
        ld.mode == "none" or longest <= e.max_model_len,
        f"load requests reach {longest} tokens, over engine.max_model_len {e.max_model_len}",
    )
    return cfg


def apply_overrides(base: SimConfig, data: dict[str, Any], source: str) -> SimConfig:
    allowed = {"scenario", "engine", "load"}
    for key in data:
        if key not in allowed:
            raise SimConfigError(f"{source}: unknown key {key} (known: engine, load, scenario)")
    cfg = base
    if "engine" in data:
        cfg = dataclasses.replace(cfg, engine=_apply(cfg.engine, "engine", data["engine"], source))
    if "load" in data:
        cfg = dataclasses.replace(cfg, load=_apply(cfg.load, "load", data["load"], source))
    return validate(cfg, source)


def read_file(path: str | Path) -> dict[str, Any]:
    """Parse a TOML (.toml) or YAML (.yaml/.yml) file into a dict; errors are one line."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise SimConfigError(f"cannot read config {p}: {exc.strerror or exc}") from None
    suffix = p.suffix.lower()
    try:
        if suffix == ".toml":
            if sys.version_info >= (3, 11):
                import tomllib
            else:  # pragma: no cover - CI runs 3.11
                import tomli as tomllib
            data = tomllib.loads(text)
        elif suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text) or {}
        else:
            raise SimConfigError(f"config {p}: use a .toml, .yaml or .yml file")
    except SimConfigError:
        raise
    except Exception as exc:  # the parsers' own error types differ; all mean a malformed file
        line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise SimConfigError(f"config {p} is malformed: {line}") from None
    if not isinstance(data, dict):
        raise SimConfigError(f"config {p}: the top level must be a table of keys")
    return data
