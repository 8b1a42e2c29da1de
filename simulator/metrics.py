"""Exposition text: the engine as vLLM's ``/metrics``, the GPU as dcgm-exporter's.

Family names, types, label names and buckets follow vLLM 0.32 (see
tests/fixtures/vllm-0.32.0-cpu-metrics-under-load.txt); labels are written in
sorted order, as prometheus_client writes them. Built fresh on every scrape.
"""

from __future__ import annotations

import math
import socket
import uuid

from simulator.config import EngineConfig
from simulator.engine import EngineCore
from simulator.gpu_timeline import Activity, power_load
from simulator.stats import FINISH_REASONS, HISTOGRAMS, Stats

MiB = 2**20


def _num(v: float) -> str:
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(float(v))


def _labels(pairs: dict[str, str], sort: bool = True) -> str:
    items = sorted(pairs.items()) if sort else pairs.items()
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in items)
    return "{" + inner + "}"


def _escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class _Writer:
    def __init__(self, base: dict[str, str], created: float) -> None:
        self.base = base
        self.created = created
        self.lines: list[str] = []

    def family(self, name: str, kind: str, help_: str) -> None:
        self.lines.append(f"# HELP {name} {help_}")
        self.lines.append(f"# TYPE {name} {kind}")

    def sample(self, name: str, value: float, extra: dict[str, str] | None = None) -> None:
        labels = {**self.base, **extra} if extra else self.base
        self.lines.append(f"{name}{_labels(labels)} {_num(value)}")

    def gauge(self, name: str, help_: str, value: float) -> None:
        self.family(name, "gauge", help_)
        self.sample(name, value)

    def counter(
        self, stem: str, help_: str, values: list[tuple[dict[str, str] | None, float]]
    ) -> None:
        self.family(f"{stem}_total", "counter", help_)
        for extra, v in values:
            self.sample(f"{stem}_total", v, extra)
        self.family(f"{stem}_created", "gauge", help_)
        for extra, _ in values:
            self.sample(f"{stem}_created", self.created, extra)

    def histogram(
        self, name: str, help_: str, cumulative: list[tuple[float, int]], total: float
    ) -> None:
        self.family(name, "histogram", help_)
        for bound, n in cumulative:
            self.sample(f"{name}_bucket", n, {"le": _num(bound)})
        self.sample(f"{name}_count", cumulative[-1][1])
        self.sample(f"{name}_sum", total)
        self.family(f"{name}_created", "gauge", help_)
        self.sample(f"{name}_created", self.created)


def cache_config_labels(cfg: EngineConfig, num_blocks: int) -> dict[str, str]:
    tokens = num_blocks * cfg.block_size
    kv_bytes = tokens * cfg.model_spec.kv_bytes_per_token
    return {
        "_block_size_resolved": "True",
        "block_size": str(cfg.block_size),
        "cache_dtype": "auto",
        "cache_hit_alignment_tokens": "None",
        "effective_attention_block_size": str(cfg.block_size),
        "enable_mamba_shared_prefix_checkpoint": "False",
        "enable_prefix_caching": str(cfg.prefix_caching),
        "gpu_memory_utilization": str(cfg.gpu_memory_utilization),
        "hash_block_size": "None",
        "is_attention_free": "False",
        "kv_cache_dtype_skip_layers": "[]",
        "kv_cache_layout": "None",
        "kv_cache_max_concurrency": str(round(tokens / cfg.max_model_len, 2)),
        "kv_cache_memory_bytes": str(kv_bytes),
        "kv_cache_size_tokens": str(tokens),
        "kv_offloading_backend": "native",
        "kv_offloading_size": "None",
        "kv_sharing_fast_prefill": "False",
        "mamba_block_size": "None",
        "mamba_cache_dtype": "auto",
        "mamba_cache_mode": "none",
        "mamba_page_size_padded": "None",
        "mamba_ssm_cache_dtype": "float32",
        "num_cpu_blocks": "None",
        "num_gpu_blocks": str(num_blocks),
        "num_gpu_blocks_override": str(cfg.num_blocks) if cfg.num_blocks else "None",
        "prefix_cache_retention_interval": "0",
        "prefix_caching_hash_algo": "sha256",
        "prefix_match_unit": "None",
        "replayssm_buffer_len": "16",
        "skip_page_size_padded": "None",
        "sliding_window": "None",
        "swa_bounded_replay": "True",
        "use_kda_recoverssm": "False",
        "use_replayssm": "False",
        "user_specified_block_size": "False",
    }


# Counters with no label of their own: (family stem, vLLM's help, the Stats field).
_ESTIMATES = (
    ("vllm:estimated_flops_per_gpu", "Estimated number of floating point operations per GPU (for Model Flops Utilization calculations).", "flops"),
    ("vllm:estimated_read_bytes_per_gpu", "Estimated number of bytes read from memory per GPU (for Model Flops Utilization calculations).", "read_bytes"),
    ("vllm:estimated_write_bytes_per_gpu", "Estimated number of bytes written to memory per GPU (for Model Flops Utilization calculations).", "write_bytes"),
)  # fmt: skip
_TOKEN_COUNTERS = (
    ("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.", "prefix_cache_queries"),
    ("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.", "prefix_cache_hits"),
    ("vllm:generation_tokens", "Number of generation tokens processed.", "generation_tokens"),
)  # fmt: skip


def render_vllm(core: EngineCore, stats: Stats) -> str:
    """vLLM's engine families; call under the engine's lock (it reads live state)."""
    cfg = core.cfg
    w = _Writer({"engine": "0", "model_name": cfg.model_name}, stats.created)
    for stem, help_, field in _ESTIMATES:
        w.counter(stem, help_, [(None, getattr(stats, field))])
    w.gauge(
        "vllm:num_requests_running",
        "Number of requests in model execution batches.",
        len(core.running),
    )
    w.gauge(
        "vllm:num_requests_waiting",
        "Number of requests waiting to be processed.",
        len(core.waiting),
    )
    w.family(
        "vllm:num_requests_waiting_by_reason",
        "gauge",
        "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for scheduling "
        "capacity; 'deferred' = deferred by transient constraints (LoRA budget, KV transfer, blocked "
        "status). Sum of all reasons equals vllm:num_requests_waiting.",
    )
    w.sample("vllm:num_requests_waiting_by_reason", len(core.waiting), {"reason": "capacity"})
    w.sample("vllm:num_requests_waiting_by_reason", 0, {"reason": "deferred"})
    w.family(
        "vllm:engine_sleep_state",
        "gauge",
        "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is awake; "
        "weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2.",
    )
    for state, v in (("awake", 1), ("weights_offloaded", 0), ("discard_all", 0)):
        w.sample("vllm:engine_sleep_state", v, {"sleep_state": state})
    w.gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", core.kv_usage)
    w.counter(
        "vllm:num_preemptions",
        "Cumulative number of preemption from the engine.",
        [(None, stats.preemptions)],
    )
    w.counter(
        "vllm:prompt_tokens", "Number of prefill tokens processed.", [(None, stats.prompt_tokens)]
    )
    w.counter(
        "vllm:prompt_tokens_by_source",
        "Number of prompt tokens by source.",
        [
            ({"source": "local_compute"}, stats.prompt_tokens - stats.prefix_cache_hits),
            ({"source": "local_cache_hit"}, stats.prefix_cache_hits),
            ({"source": "external_kv_transfer"}, 0),
        ],
    )
    for stem, help_, field in _TOKEN_COUNTERS:
        w.counter(stem, help_, [(None, getattr(stats, field))])
    w.counter(
        "vllm:request_success",
        "Count of successfully processed requests.",
        [({"finished_reason": r}, stats.success[r]) for r in FINISH_REASONS],
    )
    for name, (_, help_) in HISTOGRAMS.items():
        h = stats.hist[name]
        w.histogram(f"vllm:{name}", help_, h.cumulative(), h.sum)
    w.family("vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig")
    # vLLM labels this one with engine but not model_name.
    info = {"engine": "0", **cache_config_labels(cfg, core.num_blocks)}
    w.lines.append(f"vllm:cache_config_info{_labels(info)} 1.0")
    return "\n".join(w.lines) + "\n"


# dcgm-exporter's field names and help strings (default-counters.csv and dcp-metrics-included.csv).
_DCGM_DEV = (
    ("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEM_CLOCK", "Memory clock frequency (in MHz)."),
    ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W)."),
    ("DCGM_FI_DEV_POWER_MGMT_LIMIT", "Current power limit (in W)."),
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %)."),
    ("DCGM_FI_DEV_FB_FREE", "Frame buffer memory free (in MB)."),
    ("DCGM_FI_DEV_FB_USED", "Frame buffer memory used (in MB)."),
)
_DCGM_PROF = (
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "Ratio of time the graphics engine is active."),
    ("DCGM_FI_PROF_SM_ACTIVE", "The ratio of cycles an SM has at least 1 warp assigned."),
    ("DCGM_FI_PROF_SM_OCCUPANCY", "The ratio of number of warps resident on an SM."),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "Ratio of cycles the tensor (HMMA) pipe is active."),
    ("DCGM_FI_PROF_DRAM_ACTIVE", "Ratio of cycles the device memory interface is active sending or receiving data."),
    ("DCGM_FI_PROF_PCIE_TX_BYTES", "The rate of data transmitted over the PCIe bus - including both protocol headers and data payloads - in bytes per second."),
    ("DCGM_FI_PROF_PCIE_RX_BYTES", "The rate of data received over the PCIe bus - including both protocol headers and data payloads - in bytes per second."),
)  # fmt: skip


# Only tensor-parallel boxes show NVLink: dcgm-exporter's default set lacks these fields.
_DCGM_NVLINK = (
    ("DCGM_FI_PROF_NVLINK_TX_BYTES", "The rate of data transmitted over NVLink, not including protocol headers, in bytes per second."),
    ("DCGM_FI_PROF_NVLINK_RX_BYTES", "The rate of data received over NVLink, not including protocol headers, in bytes per second."),
)  # fmt: skip
# The PCI buses of an HGX board's eight GPUs.
_BUS_IDS = ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB")


def gpu_uuid(cfg: EngineConfig, rank: int = 0) -> str:
    # Stable per preset and seed, so a restarted simulator is "the same GPU".
    key = f"headroom-sim/{cfg.gpu}/{cfg.seed}" + (f"/{rank}" if rank else "")
    return "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_URL, key))


def render_dcgm(
    cfg: EngineConfig, num_blocks: int, act: Activity, energy_j: float | None = None
) -> str:
    """The simulated GPUs as dcgm-exporter serves them, over the last sampling period.

    One GPU, or ``tensor_parallel_size`` of them: the ranks of one engine run the same
    shards in lock step, so each reads the same activity. ``energy_j``: each board's energy
    since the simulator started (GpuTimeline.energy_j), served as the driver's counter.
    """
    gpu, model = cfg.gpu_spec, cfg.model_spec
    tp = cfg.tensor_parallel_size
    labels = [
        _labels(
            {
                "gpu": str(rank),
                "UUID": gpu_uuid(cfg, rank),
                "pci_bus_id": f"00000000:{_BUS_IDS[rank]}:00.0",
                "device": f"nvidia{rank}",
                "modelName": gpu.model_name,
                "Hostname": socket.gethostname(),
                "DCGM_FI_DRIVER_VERSION": "570.124.06",
            },
            sort=False,  # dcgm-exporter's own order
        )
        for rank in range(tp)
    ]
    load = power_load(act.util, act.tensor_active, act.dram_active)
    power = gpu.idle_watts + (gpu.tdp_watts - gpu.idle_watts) * load
    used = (
        model.weight_bytes + num_blocks * cfg.block_size * model.kv_bytes_per_token
    ) / tp + 2**30
    used_mib = int(min(used, gpu.memory_bytes) // MiB)
    total_mib = int(gpu.memory_bytes // MiB)
    busy = act.util > 0.005
    dev = {
        "DCGM_FI_DEV_SM_CLOCK": int(gpu.sm_clock_max_mhz if busy else gpu.sm_clock_idle_mhz),
        "DCGM_FI_DEV_MEM_CLOCK": int(gpu.mem_clock_mhz),
        "DCGM_FI_DEV_GPU_TEMP": int(30 + 45 * power / gpu.tdp_watts),
        "DCGM_FI_DEV_POWER_USAGE": round(power, 3),
        "DCGM_FI_DEV_POWER_MGMT_LIMIT": round(gpu.tdp_watts, 3),
        "DCGM_FI_DEV_GPU_UTIL": int(round(act.util * 100)),
        "DCGM_FI_DEV_MEM_COPY_UTIL": int(round(act.dram_active * 100)),
        "DCGM_FI_DEV_FB_FREE": total_mib - used_mib,
        "DCGM_FI_DEV_FB_USED": used_mib,
    }
    # Token ids in, sampled ids out: a few KB per step, next to nothing on PCIe.
    pcie = 2e5 * act.util
    prof = {
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE": act.util,
        "DCGM_FI_PROF_SM_ACTIVE": act.sm_active,
        "DCGM_FI_PROF_SM_OCCUPANCY": act.sm_occupancy,
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": act.tensor_active,
        "DCGM_FI_PROF_DRAM_ACTIVE": act.dram_active,
        "DCGM_FI_PROF_PCIE_TX_BYTES": pcie,
        "DCGM_FI_PROF_PCIE_RX_BYTES": pcie,
    }
    families = [(name, help_, str(dev[name])) for name, help_ in _DCGM_DEV]
    for name, help_ in _DCGM_PROF:
        value = prof[name]
        text = f"{value:.0f}" if name.startswith("DCGM_FI_PROF_PCIE") else f"{value:.6f}"
        families.append((name, help_, text))
    if tp > 1:
        families += [(n, h, f"{act.nvlink_bytes_per_s:.0f}") for n, h in _DCGM_NVLINK]
    lines: list[str] = []
    for name, help_, text in families:
        lines += [f"# HELP {name} {help_}", f"# TYPE {name} gauge"]
        lines += [f"{name}{lab} {text}" for lab in labels]
    if energy_j is not None:
        name = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
        lines += [
            f"# HELP {name} Total energy consumption since boot (in mJ).",
            f"# TYPE {name} counter",
        ]
        lines += [f"{name}{lab} {energy_j * 1000:.0f}" for lab in labels]
    return "\n".join(lines) + "\n"
