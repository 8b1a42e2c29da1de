"""Typed, immutable readings: what each source returns on one tick.

A value a device or server does not support, or that could not be read, is
``None``, never 0: a 0 would be a claim ("the tensor cores were idle") that we
cannot make. Only the edges decide how to show a ``None`` (the exporter omits
the series, the TUI shows a dash, JSON writes null).

GPU and host samples carry values *over the tick just ended* (the sources are
stateful: NVML's driver samples and GPM both need two readings). Engine samples
carry the server's raw cumulative counters and histogram buckets, so that any
two samples of a window give rates and quantiles (see ``monitor.window.full``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

GpuSourceKind = Literal["nvml", "dcgm", "dcgm-exporter"]


@dataclass(frozen=True, slots=True)
class GpuProcess:
    """One process holding a GPU (or MIG instance), as NVML lists it, with who it is.

    ``visible`` is False when NVML names a PID this headroom cannot see: it runs in a
    container without the host's PID namespace, and NVML answers with host PIDs. Then
    only the PID and its memory are known.
    """

    pid: int
    memory_bytes: int | None = None
    # The process's share of the GPU's time with its kernels on the SMs, and with its
    # memory reads or writes, from NVML's per-process samples since the previous read.
    sm_share: float | None = None
    mem_share: float | None = None
    user: str | None = None
    command: str | None = None
    # From /proc/PID/cgroup: the container's id (12 hex digits, as docker and crictl show
    # it), its runtime, and under Kubernetes the pod's UID, name and namespace.
    container: str | None = None
    runtime: str | None = None
    pod_uid: str | None = None
    pod: str | None = None
    namespace: str | None = None
    visible: bool = True


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One GPU (or MIG instance) over one tick. Ratios are 0-1."""

    index: int
    uuid: str
    name: str
    source: GpuSourceKind
    # NVML duty cycle: share of the period with any kernel running.
    util: float | None = None
    # NVML memory duty cycle (not bandwidth: see dram_active).
    mem_util: float | None = None
    # GPM / DCGM profiling metrics.
    sm_active: float | None = None
    sm_occupancy: float | None = None
    tensor_active: float | None = None
    dram_active: float | None = None
    fp16_active: float | None = None
    fp32_active: float | None = None
    power_watts: float | None = None
    power_limit_watts: float | None = None
    sm_clock_hz: float | None = None
    sm_clock_max_hz: float | None = None
    # Names of active clock-throttle reasons ("sw_power_cap", "hw_slowdown", ...).
    throttle_reasons: tuple[str, ...] | None = None
    temperature_c: float | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    pcie_tx_bytes_per_s: float | None = None
    pcie_rx_bytes_per_s: float | None = None
    nvlink_tx_bytes_per_s: float | None = None
    nvlink_rx_bytes_per_s: float | None = None
    # The PCIe link's generation and lane count (its most, not the idle downshift): the
    # link's peak, against which host transfers are judged.
    pcie_link_gen: int | None = None
    pcie_link_width: int | None = None
    # NVML's utilization.gpu, what nvidia-smi shows, where util comes from elsewhere (GPM's
    # graphics activity counts kernels only; the driver's figure also counts copies).
    driver_util: float | None = None
    # MIG: the parent GPU's index when this is a MIG instance.
    mig_parent: int | None = None
    # MIG: the GPU instance id (what nvidia-smi shows as GI ID): the scope is gpu:P/mig:GI.
    mig_instance: int | None = None
    # The processes holding this device, as of the latest process read (read every few
    # seconds, not every tick); None when not read or not supported.
    processes: tuple[GpuProcess, ...] | None = None
    # Extra labels kept from the source (dcgm-exporter's pod, namespace, ...).
    labels: tuple[tuple[str, str], ...] = ()
    # The device's energy, a cumulative counter in joules: only its increases mean anything
    # (NVML: since headroom's first reading; DCGM: since the driver loaded). ``energy_source``
    # says where it comes from: "counter" (the driver's energy counter) or "power" (power
    # readings integrated over the ticks, where the GPU has no counter).
    energy_joules: float | None = None
    energy_source: str | None = None


@dataclass(frozen=True, slots=True)
class Histogram:
    """A cumulative Prometheus histogram: ``buckets`` are (upper bound, cumulative count)."""

    buckets: tuple[tuple[float, float], ...]
    sum: float
    count: float


@dataclass(frozen=True, slots=True)
class EngineSample:
    """One serving engine (one ``model_name``/``engine`` pair of one URL) at one instant.

    Gauges are instantaneous; ``*_total`` fields are the server's cumulative
    counters; ``histograms`` maps canonical names (see
    ``monitor.sources.metric_names``) to cumulative histograms.
    """

    url: str
    model_name: str
    engine: str
    running: float | None = None
    waiting: float | None = None
    waiting_capacity: float | None = None
    waiting_deferred: float | None = None
    kv_cache_usage: float | None = None
    # A gauge 0-1 where the server keeps one (vLLM V0, SGLang, TensorRT-LLM).
    prefix_cache_hit_rate: float | None = None
    # The sequence cap the engine reports itself (Triton); most engines do not.
    seq_cap_reported: float | None = None
    preemptions_total: float | None = None
    prompt_tokens_total: float | None = None
    generation_tokens_total: float | None = None
    request_success_total: float | None = None
    admission_rejections_total: float | None = None
    estimated_flops_total: float | None = None
    estimated_read_bytes_total: float | None = None
    estimated_write_bytes_total: float | None = None
    prefix_cache_queries_total: float | None = None  # prompt tokens looked up in the cache
    prefix_cache_hits_total: float | None = None  # of those, tokens found cached
    histograms: tuple[tuple[str, Histogram], ...] = ()
    # vllm:cache_config_info labels (block_size, num_gpu_blocks, ...).
    cache_config: tuple[tuple[str, str], ...] = ()
    # Which server family answered ("vllm", ...): selects the name table.
    flavour: str = "vllm"
    # The engine's caps as the engine itself reported them (monitor.sources.engine_config),
    # and how they were asked: "server_info", "cmdline", or "" when it could not be asked.
    reported_max_num_seqs: float | None = None
    reported_max_num_batched_tokens: float | None = None
    reported_caps_origin: str = ""
    # The releases whose name table matched the page ("0.10.2+ (V1)"); None if unknown.
    flavour_version: str | None = None
    # (field, server names looked for) for each field the page did not give; no names:
    # this server exports none for it.
    missing: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def histogram(self, name: str) -> Histogram | None:
        for key, hist in self.histograms:
            if key == name:
                return hist
        return None

    def cache_config_value(self, key: str) -> str | None:
        for k, v in self.cache_config:
            if k == key:
                return v
        return None


@dataclass(frozen=True, slots=True)
class ThreadCpu:
    tid: int
    name: str
    cpu_seconds: float


@dataclass(frozen=True, slots=True)
class ProcessCpu:
    """Cumulative CPU of one engine process and its threads."""

    pid: int
    name: str
    cpu_seconds: float
    threads: tuple[ThreadCpu, ...] = ()


@dataclass(frozen=True, slots=True)
class HostSample:
    """The host at one instant: cumulative CPU times, so a window yields rates."""

    cpu_count: int
    # Cumulative seconds summed over all CPUs (psutil.cpu_times()).
    cpu_total_seconds: float
    cpu_idle_seconds: float
    cpu_steal_seconds: float | None = None
    cpu_freq_mhz: float | None = None
    cpu_freq_max_mhz: float | None = None
    # The engine's processes (found from a port or given PIDs).
    processes: tuple[ProcessCpu, ...] = ()


@dataclass(frozen=True, slots=True)
class SourceError:
    """A source that failed on this tick: shown in place, never fatal."""

    source: str  # "nvml", "dcgm-exporter", "vllm", "host", ...
    target: str  # the URL, the GPU, or "" when not specific
    message: str  # one line, for humans


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything read on one tick. ``t`` is monotonic seconds, ``wall`` Unix time."""

    t: float
    wall: float
    gpus: tuple[GpuSample, ...] = ()
    engines: tuple[EngineSample, ...] = ()
    host: HostSample | None = None
    errors: tuple[SourceError, ...] = ()
    # Seconds the tick took to read every source (a self-metric).
    duration_s: float = 0.0
    # Load the generator reports while it drives (target concurrency/rate, client in-flight).
    load: tuple[tuple[str, float], ...] = field(default=())
