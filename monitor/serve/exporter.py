"""Prometheus collectors built from the monitor's latest window and diagnosis.

A scrape never calls NVML or HTTP: each collector reads what the sampler
thread last computed (``Monitor.window()``, ``Monitor.diagnosis()``) and builds
fresh metric families, so fifty scrapers at once cost fifty renders of the
same numbers. GPU and engine figures are the means and rates over the agent's
diagnosis window (``--window``): the same numbers the diagnosis judged, which
is what lets the alert rules and the Python diagnosis agree. A value that was
not read is absent, never 0.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry

from monitor.diagnosis.energy import window_energy
from monitor.diagnosis.gpu_sharing import sharing
from monitor.diagnosis.verdict import CAUSES, Verdict
from monitor.sources.samples import Snapshot
from monitor.window.scopes import engine_scope, gpu_label, gpu_scope
from monitor.window.stats import GpuWindow, WindowStats

GPU_LABELS = ("gpu", "uuid", "model", "source")
# Per container, not per PID: PIDs change on every restart and would churn series.
CONTAINER_LABELS = ("gpu", "container", "pod", "namespace")
ENGINE_LABELS = ("url", "model_name", "engine")
DIAG_LABELS = ("cause", "scope")

# (metric name, GpuWindow field, help)
GPU_GAUGES: tuple[tuple[str, str, str], ...] = (
    ("headroom_gpu_utilization_ratio", "util", "Share of the time a kernel ran (NVML duty cycle)."),
    ("headroom_gpu_utilization_max_ratio", "util_max", "Highest per-tick duty cycle in the window."),
    ("headroom_gpu_sm_active_ratio", "sm_active", "Share of SM cycles with a warp resident."),
    ("headroom_gpu_sm_occupancy_ratio", "sm_occupancy", "Resident warps over the maximum."),
    ("headroom_gpu_tensor_active_ratio", "tensor_active", "Tensor-pipe active cycles."),
    ("headroom_gpu_dram_active_ratio", "dram_active", "Device-memory interface busy."),
    ("headroom_gpu_fp16_active_ratio", "fp16_active", "FP16 pipe active cycles."),
    ("headroom_gpu_fp32_active_ratio", "fp32_active", "FP32 pipe active cycles."),
    ("headroom_gpu_memory_copy_utilization_ratio", "mem_util", "NVML memory duty cycle (not bandwidth)."),
    ("headroom_gpu_power_watts", "power_watts", "Power draw."),
    ("headroom_gpu_power_limit_watts", "power_limit_watts", "Enforced power limit."),
    ("headroom_gpu_sm_clock_hertz", "sm_clock_hz", "SM clock."),
    ("headroom_gpu_sm_clock_max_hertz", "sm_clock_max_hz", "Highest SM clock."),
    ("headroom_gpu_temperature_celsius", "temperature_c", "GPU temperature."),
    ("headroom_gpu_memory_used_bytes", "memory_used_bytes", "Device memory in use."),
    ("headroom_gpu_memory_total_bytes", "memory_total_bytes", "Device memory in all."),
    ("headroom_gpu_pcie_transmit_bytes_per_second", "pcie_tx_bytes_per_s", "PCIe transmit."),
    ("headroom_gpu_pcie_receive_bytes_per_second", "pcie_rx_bytes_per_s", "PCIe receive."),
    ("headroom_gpu_pcie_peak_bytes_per_second", "pcie_peak_bytes_per_s", "The PCIe link's peak, one direction (its generation and width)."),
    ("headroom_gpu_nvidia_smi_utilization_ratio", "driver_util", "NVML's utilization.gpu as nvidia-smi shows it (counts copies; headroom_gpu_utilization_ratio counts kernels)."),
    ("headroom_gpu_nvlink_transmit_bytes_per_second", "nvlink_tx_bytes_per_s", "NVLink transmit."),
    ("headroom_gpu_nvlink_receive_bytes_per_second", "nvlink_rx_bytes_per_s", "NVLink receive."),
)  # fmt: skip

# (metric name, EngineWindow field, help)
ENGINE_GAUGES: tuple[tuple[str, str, str], ...] = (
    ("headroom_engine_requests_running", "running_mean", "Mean requests running (R)."),
    ("headroom_engine_requests_running_max", "running_max", "Most requests running at once."),
    ("headroom_engine_requests_waiting", "waiting_mean", "Mean requests waiting (Q)."),
    ("headroom_engine_requests_waiting_max", "waiting_max", "Most requests waiting at once."),
    ("headroom_engine_kv_cache_usage_ratio", "kv_cache_usage_mean", "Mean KV-cache usage (K)."),
    ("headroom_engine_kv_cache_usage_max_ratio", "kv_cache_usage_max", "Highest KV-cache usage."),
    ("headroom_engine_preemptions_per_second", "preemptions_per_s", "Preemptions per second."),
    ("headroom_engine_requests_per_second", "requests_per_s", "Requests completed per second."),
    ("headroom_engine_prompt_tokens_per_second", "prompt_tokens_per_s", "Prompt tokens per second."),
    ("headroom_engine_generation_tokens_per_second", "generation_tokens_per_s", "Generated tokens per second."),
    ("headroom_engine_admission_rejections_per_second", "admission_rejections_per_s", "Requests rejected at admission per second."),
    ("headroom_engine_flops_per_second", "flops_per_s", "Estimated FLOP/s achieved (vLLM's estimate)."),
    ("headroom_engine_iteration_tokens_mean", "iteration_tokens_mean", "Mean tokens per engine step."),
    ("headroom_engine_e2e_request_latency_mean_seconds", "e2e_mean_s", "Mean end-to-end request latency (W)."),
    ("headroom_engine_request_queue_time_mean_seconds", "queue_mean_s", "Mean time a request waited."),
)  # fmt: skip

# Window quantiles as plain gauges, one per quantile: a gauge with a `quantile` label would
# pose as a summary (`promtool check metrics` rejects it), and these are not one.
ENGINE_QUANTILES: tuple[tuple[str, str, str], ...] = (
    ("headroom_engine_time_to_first_token_p50_seconds", "ttft_p50_s", "Median time to first token over the window."),
    ("headroom_engine_time_to_first_token_p95_seconds", "ttft_p95_s", "95th percentile time to first token over the window."),
    ("headroom_engine_inter_token_latency_p50_seconds", "itl_p50_s", "Median inter-token latency over the window."),
    ("headroom_engine_inter_token_latency_p95_seconds", "itl_p95_s", "95th percentile inter-token latency over the window."),
    ("headroom_engine_e2e_request_latency_p50_seconds", "e2e_p50_s", "Median end-to-end latency over the window."),
    ("headroom_engine_e2e_request_latency_p95_seconds", "e2e_p95_s", "95th percentile end-to-end latency over the window."),
)  # fmt: skip

# The diagnosis's per-engine figures (``monitor.diagnosis.figures.engine_analysis`` keys, a
# path into its dict) -> (metric name, scale to base units, help). Absent keys are not exported.
ANALYSIS_GAUGES: tuple[tuple[tuple[str, ...], str, float, str], ...] = (
    (("littles_in_flight",), "headroom_engine_in_flight_requests", 1.0, "Requests in flight at the engine: mean R + Q."),
    (("littles_predicted_in_flight",), "headroom_engine_in_flight_predicted_requests", 1.0, "Little's law in-flight: arrival rate x mean latency."),
    (("littles_throughput_rps",), "headroom_engine_arrival_rate_requests_per_second", 1.0, "The request rate Little's law and the fill rate use: the engine's completions per second."),
    (("littles_ok",), "headroom_engine_littles_law_consistent", 1.0, "1 when measured and predicted in-flight agree."),
    (("slot_latency_s",), "headroom_engine_slot_latency_seconds", 1.0, "How long a request holds a sequence slot."),
    (("fill_rate_rps",), "headroom_engine_fill_rate_requests_per_second", 1.0, "Request rate that would fill the sequence cap (C / slot time)."),
    (("fill_share",), "headroom_engine_fill_share_ratio", 1.0, "Request rate now over the rate that would fill the sequence cap."),
    (("waiting_share",), "headroom_engine_waiting_share_ratio", 1.0, "Share of samples with requests waiting."),
    (("queue_sustained",), "headroom_engine_queue_sustained", 1.0, "1 when requests waited through the window."),
    (("token_pinned_share",), "headroom_engine_token_budget_pinned_ratio", 1.0, "Share of steps at the token budget."),
    (("prefill_share",), "headroom_engine_prefill_share_ratio", 1.0, "Share of processed tokens that are prompt tokens."),
    (("busy_fraction",), "headroom_engine_busy_ratio", 1.0, "Share of the time the GPU was busy with the engine's work."),
    (("steps_per_s",), "headroom_engine_steps_per_second", 1.0, "Engine steps per second."),
    (("gpu_ms_per_step",), "headroom_engine_gpu_seconds_per_step", 1e-3, "GPU time per engine step."),
    (("host_gap_ms_per_step",), "headroom_engine_host_gap_seconds_per_step", 1e-3, "GPU idle gap per engine step (host work not overlapped)."),
    (("engine_thread_cpu_ratio",), "headroom_engine_thread_cpu_ratio", 1.0, "Busiest engine thread, as a share of one core."),
    (("headroom", "factor"), "headroom_engine_load_headroom_ratio", 1.0, "How many times the load can grow before the first limit (headroom_engine_first_limit names it)."),
    (("headroom", "concurrency_at_limit"), "headroom_engine_concurrency_at_limit", 1.0, "Requests running at the first limit, by Little's law."),
    (("headroom", "rate_at_limit_rps"), "headroom_engine_rate_at_limit_requests_per_second", 1.0, "Request rate at the first limit."),
    (("ttft_parts", "queue_s"), "headroom_engine_ttft_queue_seconds", 1.0, "Mean time to first token spent queueing in the engine."),
    (("ttft_parts", "prefill_s"), "headroom_engine_ttft_prefill_seconds", 1.0, "Mean time to first token spent in prefill."),
    (("roofline", "achieved_flops_per_s"), "headroom_engine_roofline_flops_per_second", 1.0, "Achieved FLOP/s (vLLM's estimate)."),
    (("roofline", "achieved_bytes_per_s"), "headroom_engine_roofline_bytes_per_second", 1.0, "Achieved device-memory bytes/s (vLLM's estimate)."),
    (("roofline", "arithmetic_intensity"), "headroom_engine_roofline_arithmetic_intensity", 1.0, "FLOP per byte moved."),
    (("roofline", "ridge_intensity"), "headroom_engine_roofline_ridge_intensity", 1.0, "FLOP per byte where the GPU's roofline turns."),
    (("roofline", "mfu"), "headroom_engine_roofline_mfu_ratio", 1.0, "Achieved over peak FLOP/s."),
    (("roofline", "bandwidth_share"), "headroom_engine_roofline_bandwidth_ratio", 1.0, "Achieved over peak memory bandwidth."),
)  # fmt: skip

# The box's energy over the window against every engine's tokens (monitor.diagnosis.energy.Energy):
# (metric name, Energy attribute, help). Absent without a GPU energy or power reading.
ENERGY_GAUGES: tuple[tuple[str, str, str], ...] = (
    ("headroom_engine_energy_per_token_joules", "joules_per_token", "GPU energy per generated token over the window (the box's GPUs over every engine's tokens)."),
    ("headroom_engine_energy_per_request_joules", "joules_per_request", "GPU energy per completed request over the window."),
    ("headroom_engine_tokens_per_joule", "tokens_per_joule", "Generated tokens per joule of GPU energy over the window."),
    ("headroom_engine_cost_per_million_tokens", "cost_per_million_tokens", "What a million generated tokens cost at this load, at the agent's gpu_hour_price."),
)  # fmt: skip

# Caps: (value key, inferred flag key, assumed flag key, metric name, help).
CAP_GAUGES: tuple[tuple[str, str, str | None, str, str], ...] = (
    ("seq_cap", "seq_cap_inferred", "seq_cap_assumed", "headroom_engine_seq_cap", "Sequence cap the diagnosis used (max_num_seqs); origin says where it came from."),
    ("token_budget", "token_budget_inferred", None, "headroom_engine_token_budget", "Token budget per step the diagnosis used (max_num_batched_tokens)."),
)  # fmt: skip

HOST_GAUGES: tuple[tuple[str, str, str], ...] = (
    ("headroom_host_cpu_busy_ratio", "cpu_busy_ratio", "Share of all CPUs busy."),
    ("headroom_host_cpu_steal_ratio", "cpu_steal_ratio", "Share of CPU time stolen by the hypervisor."),
    ("headroom_host_engine_cpu_cores", "engine_cpu_cores", "CPU of the engine's processes, in cores."),
)  # fmt: skip

TICK_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class MonitorView(Protocol):
    """What the collectors read: ``monitor.watch.pipeline.Monitor`` provides both."""

    def window(self) -> WindowStats | None: ...

    def diagnosis(self) -> Any: ...


def _num(v: Any) -> float | None:
    """A number to export, or None. Booleans become 0/1 (a flag is a fact, not a reading)."""
    if isinstance(v, bool):
        return 1.0 if v else 0.0
    if v is None or not isinstance(v, (int, float)):
        return None
    return float(v)


def _one(name: str, doc: str, value: float, family: type = GaugeMetricFamily) -> Metric:
    """A family of one unlabelled sample."""
    fam = family(name, doc)
    fam.add_metric([], value)
    return fam


def _families(table: Iterable[tuple[str, str, str]], labels: Sequence[str]) -> dict[str, Any]:
    """One gauge family per (name, attribute, doc) row of a table, by name."""
    return {name: GaugeMetricFamily(name, doc, labels=labels) for name, _, doc in table}


def _fill(
    families: Mapping[str, Any],
    table: Iterable[tuple[str, str, str]],
    obj: object,
    labels: list[str],
) -> None:
    """Each row's attribute of obj into its family; a missing reading adds no sample."""
    for name, attr, _ in table:
        value = _num(getattr(obj, attr))
        if value is not None:
            families[name].add_metric(labels, value)


class _ViewCollector(Collector):
    def __init__(self, view: MonitorView) -> None:
        self._view = view


def _path(d: Mapping[str, Any], path: Sequence[str]) -> Any:
    cur: Any = d
    for key in path:
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(key)
    return cur


class GpuCollector(_ViewCollector):
    def collect(self) -> Iterable[Metric]:
        window = self._view.window()
        if window is None:
            return
        families = _families(GPU_GAUGES, GPU_LABELS)
        throttle = GaugeMetricFamily(
            "headroom_gpu_clock_throttle_active",
            "1 for each clock-throttle reason active during the window.",
            labels=(*GPU_LABELS, "reason"),
        )
        by_owner = {
            name: GaugeMetricFamily(name, doc, labels=(*GPU_LABELS, "owner"))
            for name, doc in (
                ("headroom_gpu_processes", _OWNER_DOC + " Processes on the GPU."),
                ("headroom_gpu_process_memory_bytes", _OWNER_DOC + " Their GPU memory."),
                (
                    "headroom_gpu_process_sm_share_ratio",
                    _OWNER_DOC + " Their share of the time with kernels on the SMs.",
                ),
            )
        }
        containers = {
            name: GaugeMetricFamily(name, doc, labels=CONTAINER_LABELS)
            for name, doc in (
                (
                    "headroom_gpu_container_memory_bytes",
                    'GPU memory held by a container\'s processes (container "": host '
                    "processes; pod and namespace under Kubernetes).",
                ),
                (
                    "headroom_gpu_container_sm_share_ratio",
                    "A container's processes' share of the GPU's time with kernels on the SMs.",
                ),
            )
        }
        energy = CounterMetricFamily(
            "headroom_gpu_energy_joules",
            "Energy the GPU drew since headroom began to read it (NVML; DCGM: since the driver "
            "loaded). energy_from: counter (the driver's energy counter) or power (power "
            "readings integrated over the ticks, where the GPU has no counter).",
            labels=(*GPU_LABELS, "energy_from"),
        )
        for g in window.gpus:
            labels = [gpu_label(g), g.uuid, g.name, g.source]
            _fill(families, GPU_GAUGES, g, labels)
            if g.energy_joules_total is not None:
                energy.add_metric(
                    [*labels, g.energy_source or "counter"],
                    g.energy_joules_total,
                    timestamp=g.energy_read_wall,
                )
            for reason in g.throttle_reasons or ():
                throttle.add_metric([*labels, reason], 1.0)
            _processes(window, g, labels, by_owner, containers)
        yield from (f for f in families.values() if f.samples)
        if energy.samples:
            yield energy
        if throttle.samples:
            yield throttle
        yield from (f for f in (*by_owner.values(), *containers.values()) if f.samples)


_OWNER_DOC = (
    "By owner: engine (the watched engine's process tree), other, or unseen (a PID NVML "
    "names that headroom cannot see from its PID namespace)."
)


def _processes(
    window: WindowStats,
    g: GpuWindow,
    labels: list[str],
    by_owner: Mapping[str, GaugeMetricFamily],
    containers: Mapping[str, GaugeMetricFamily],
) -> None:
    share = sharing(g, window)
    if share is None:
        return
    for owner, procs in (
        ("engine", share.engine),
        ("other", share.other),
        ("unseen", share.unseen),
    ):
        row = [*labels, owner]
        by_owner["headroom_gpu_processes"].add_metric(row, float(len(procs)))
        mem = [p.memory_bytes for p in procs]
        if procs and all(m is not None for m in mem):
            by_owner["headroom_gpu_process_memory_bytes"].add_metric(row, float(sum(mem)))  # type: ignore[arg-type]
        sm = [p.sm_share for p in procs]
        if procs and all(s is not None for s in sm):
            by_owner["headroom_gpu_process_sm_share_ratio"].add_metric(row, float(sum(sm)))  # type: ignore[arg-type]
    # Visible processes only: an unseen PID's container cannot be read.
    acc: dict[tuple[str, str, str], list[float | None]] = {}
    for p in (*share.engine, *share.other):
        if not p.visible:
            continue
        key = (p.container or "", p.pod or "", p.namespace or "")
        a = acc.setdefault(key, [0.0, 0.0])
        a[0] = None if a[0] is None or p.memory_bytes is None else a[0] + p.memory_bytes
        a[1] = None if a[1] is None or p.sm_share is None else a[1] + p.sm_share
    for (container, pod, namespace), (mem_sum, sm_sum) in acc.items():
        row = [labels[0], container, pod, namespace]
        if mem_sum is not None:
            containers["headroom_gpu_container_memory_bytes"].add_metric(row, mem_sum)
        if sm_sum is not None:
            containers["headroom_gpu_container_sm_share_ratio"].add_metric(row, sm_sum)


class EngineCollector(_ViewCollector):
    def collect(self) -> Iterable[Metric]:
        window = self._view.window()
        if window is None:
            return
        diagnosis = self._view.diagnosis()
        analyses: Mapping[str, Mapping[str, Any]] = getattr(diagnosis, "analyses", None) or {}
        families = _families(ENGINE_GAUGES + ENGINE_QUANTILES, ENGINE_LABELS)
        for _, name, _, doc in ANALYSIS_GAUGES:
            families[name] = GaugeMetricFamily(name, doc, labels=ENGINE_LABELS)
        for _, _, _, name, doc in CAP_GAUGES:
            families[name] = GaugeMetricFamily(name, doc, labels=(*ENGINE_LABELS, "origin"))
        first = GaugeMetricFamily(
            "headroom_engine_first_limit",
            "1 for the limit the load meets first as it grows (seq-cap, kv-cap, compute, bandwidth, cpu, token-cap).",
            labels=(*ENGINE_LABELS, "limit"),
        )
        info = GaugeMetricFamily(
            "headroom_engine_info",
            "1 per engine: which server it is and the releases whose metric names matched.",
            labels=(*ENGINE_LABELS, "flavour", "flavour_version"),
        )
        missing = GaugeMetricFamily(
            "headroom_engine_metric_missing",
            "1 for each field the engine's metrics page lacks: its series here are absent "
            "because unknown, not 0.",
            labels=(*ENGINE_LABELS, "flavour", "field"),
        )
        side = GaugeMetricFamily(
            "headroom_engine_roofline_side",
            "1 on the side of the roofline's ridge the engine sits (compute or memory).",
            labels=(*ENGINE_LABELS, "side", "gpu_model"),
        )
        for name, _, doc in ENERGY_GAUGES:
            families[name] = GaugeMetricFamily(name, doc, labels=ENGINE_LABELS)
        box_energy = window_energy(window, getattr(self._view, "gpu_hour_price", None))
        for e in window.engines:
            labels = [e.url, e.model_name, e.engine]
            _fill(families, ENERGY_GAUGES, box_energy, labels)
            info.add_metric([*labels, e.flavour, e.flavour_version or ""], 1.0)
            for field, _ in e.missing:
                missing.add_metric([*labels, e.flavour, field], 1.0)
            _fill(families, ENGINE_GAUGES + ENGINE_QUANTILES, e, labels)
            analysis = analyses.get(engine_scope(e), {})
            for path, name, scale, _ in ANALYSIS_GAUGES:
                value = _num(_path(analysis, path))
                if value is not None:
                    families[name].add_metric(labels, value * scale)
            for key, inferred, assumed, name, _ in CAP_GAUGES:
                value = _num(analysis.get(key))
                if value is None:
                    continue
                origin = analysis.get(f"{key}_origin") or "given"
                if assumed is not None and analysis.get(assumed):
                    origin = "assumed"
                elif analysis.get(inferred):
                    origin = "inferred"
                elif analysis.get(f"{key}_reported"):
                    origin = "reported"  # exported by the engine itself
                families[name].add_metric([*labels, origin], value)
            room = analysis.get("headroom")
            if isinstance(room, Mapping) and room.get("limit"):
                first.add_metric([*labels, str(room["limit"])], 1.0)
            roof = analysis.get("roofline")
            if isinstance(roof, Mapping) and roof.get("side"):
                side.add_metric([*labels, str(roof["side"]), str(roof.get("gpu") or "")], 1.0)
        yield from (f for f in families.values() if f.samples)
        for fam in (info, missing, first, side):
            if fam.samples:
                yield fam


class HostCollector(_ViewCollector):
    def collect(self) -> Iterable[Metric]:
        window = self._view.window()
        host = window.host if window is not None else None
        if host is None:
            return
        for name, attr, doc in HOST_GAUGES:
            value = _num(getattr(host, attr))
            if value is not None:
                yield _one(name, doc, value)
        if host.busiest_thread is not None:
            # The thread's name, not its id: ids change on every restart and would churn series.
            fam = GaugeMetricFamily(
                "headroom_host_engine_busiest_thread_cpu_ratio",
                "CPU of the engine's busiest thread, as a share of one core.",
                labels=("thread",),
            )
            fam.add_metric([host.busiest_thread.name], host.busiest_thread.cpu_ratio)
            yield fam
        # Not *_count: that suffix belongs to histograms and summaries.
        yield _one("headroom_host_cpus", "CPUs on the host.", float(host.cpu_count))


class DiagnosisCollector(_ViewCollector):
    """headroom_diagnosis{cause,scope}: 1 for each current verdict, 0 for every other cause
    of a scope the agent watches, so alerts can test ``== 1`` and state timelines have rows."""

    def collect(self) -> Iterable[Metric]:
        window = self._view.window()
        diagnosis = self._view.diagnosis()
        if window is None or diagnosis is None:
            return
        verdicts: Sequence[Verdict] = getattr(diagnosis, "verdicts", ()) or ()
        scopes = ["box"]
        scopes += [gpu_scope(g) for g in window.gpus]
        scopes += [engine_scope(e) for e in window.engines]
        scopes += [v.scope for v in verdicts]
        current = {(v.cause, v.scope): v for v in verdicts}
        state = GaugeMetricFamily(
            "headroom_diagnosis",
            "1 while the diagnosis names this cause for this scope, else 0.",
            labels=DIAG_LABELS,
        )
        confidence = GaugeMetricFamily(
            "headroom_diagnosis_confidence",
            "Confidence (0-1) of each current verdict.",
            labels=DIAG_LABELS,
        )
        rank = GaugeMetricFamily(
            "headroom_diagnosis_rank",
            "Position of each current verdict in the diagnosis's order (0 leads: the cause "
            "snapshot and the TUI name first).",
            labels=DIAG_LABELS,
        )
        evidence = GaugeMetricFamily(
            "headroom_diagnosis_evidence",
            "The numbers that decided each current verdict.",
            labels=(*DIAG_LABELS, "name"),
        )
        threshold = GaugeMetricFamily(
            "headroom_diagnosis_evidence_threshold",
            "The threshold each piece of evidence was held against.",
            labels=(*DIAG_LABELS, "name"),
        )
        for scope in dict.fromkeys(scopes):
            for cause in CAUSES:
                state.add_metric([cause, scope], 1.0 if (cause, scope) in current else 0.0)
        for i, v in enumerate(verdicts):
            confidence.add_metric([v.cause, v.scope], float(v.confidence))
            rank.add_metric([v.cause, v.scope], float(i))
            seen: set[str] = set()
            for e in v.evidence:
                if e.name in seen:
                    continue
                seen.add(e.name)
                if e.value is not None:
                    evidence.add_metric([v.cause, v.scope, e.name], float(e.value))
                if e.threshold is not None:
                    threshold.add_metric([v.cause, v.scope, e.name], float(e.threshold))
        yield state
        for fam in (confidence, rank, evidence, threshold):
            if fam.samples:
                yield fam


class SelfStats(Collector):
    """The agent's own figures, fed by the sampler thread (a snapshot listener and the
    source wrappers); collectors read them under the lock."""

    def __init__(self, wall: Callable[[], float] = time.time) -> None:
        self._wall = wall
        self._lock = threading.Lock()
        self._bucket_counts = [0] * (len(TICK_BUCKETS) + 1)
        self._tick_sum = 0.0
        self._ticks = 0
        self._errors: dict[tuple[str, str], int] = {}
        self._last_success: dict[tuple[str, str], float] = {}
        self._last_tick_wall: float | None = None
        self._start = wall()

    def on_snapshot(self, snap: Snapshot) -> None:
        with self._lock:
            i = 0
            while i < len(TICK_BUCKETS) and snap.duration_s > TICK_BUCKETS[i]:
                i += 1
            self._bucket_counts[i] += 1
            self._tick_sum += snap.duration_s
            self._ticks += 1
            self._last_tick_wall = snap.wall
            for err in snap.errors:
                key = (err.source, err.target)
                self._errors[key] = self._errors.get(key, 0) + 1

    def now(self) -> float:
        """The wall clock the figures are stamped with."""
        return self._wall()

    def source_succeeded(self, source: str, target: str = "", wall: float | None = None) -> None:
        with self._lock:
            self._last_success[(source, target)] = self._wall() if wall is None else wall

    def source_ages(self, sources: Iterable[tuple[str, str]]) -> dict[tuple[str, str], float]:
        """Seconds since each (source, target) last gave data (since the start: never)."""
        now = self._wall()
        with self._lock:
            return {
                key: now - self._last_success.get(key, self._start)
                for key in dict.fromkeys(sources)
            }

    def last_tick_wall(self) -> float | None:
        with self._lock:
            return self._last_tick_wall

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            counts = list(self._bucket_counts)
            tick_sum, ticks = self._tick_sum, self._ticks
            errors = dict(self._errors)
            last_success = dict(self._last_success)
            last_tick = self._last_tick_wall
        cumulative, buckets = 0, []
        for bound, count in zip((*TICK_BUCKETS, float("inf")), counts):
            cumulative += count
            buckets.append(("+Inf" if bound == float("inf") else repr(bound), cumulative))
        hist = HistogramMetricFamily(
            "headroom_agent_tick_duration_seconds", "Seconds one tick took to read every source."
        )
        hist.add_metric([], buckets, sum_value=tick_sum)
        yield hist
        yield _one(
            "headroom_agent_ticks",
            "Ticks since the agent started.",
            float(ticks),
            CounterMetricFamily,
        )
        fam = CounterMetricFamily(
            "headroom_agent_source_errors",
            "Errors sources reported, by source and target.",
            labels=("source", "target"),
        )
        for (source, target), n in sorted(errors.items()):
            fam.add_metric([source, target], float(n))
        yield fam
        fam = GaugeMetricFamily(
            "headroom_agent_source_last_success_timestamp_seconds",
            "Unix time of each source's last read that returned data or no error.",
            labels=("source", "target"),
        )
        for (source, target), wall in sorted(last_success.items()):
            fam.add_metric([source, target], wall)
        yield fam
        if last_tick is not None:
            yield _one(
                "headroom_agent_last_tick_timestamp_seconds",
                "Unix time of the last tick.",
                last_tick,
            )
        yield _one("headroom_agent_start_time_seconds", "Unix time the agent started.", self._start)


class InfoCollector(Collector):
    def __init__(self, version: str, interval: float, window: float) -> None:
        self._version, self._interval, self._window = version, interval, window

    def collect(self) -> Iterable[Metric]:
        fam = GaugeMetricFamily(
            "headroom_agent_build_info", "The agent's version.", labels=("version",)
        )
        fam.add_metric([self._version], 1.0)
        yield fam
        yield _one("headroom_agent_interval_seconds", "Seconds between ticks.", self._interval)
        yield _one(
            "headroom_agent_window_seconds",
            "Seconds of the window the diagnosis judges.",
            self._window,
        )


def view_collectors(view: MonitorView) -> tuple[Collector, ...]:
    """The collectors of what the monitor read and judged (GPUs, engines, host, diagnosis)."""
    return (
        GpuCollector(view),
        EngineCollector(view),
        HostCollector(view),
        DiagnosisCollector(view),
    )


def build_registry(
    view: MonitorView,
    stats: SelfStats,
    version: str = "0",
    interval: float = 1.0,
    window: float = 10.0,
) -> CollectorRegistry:
    """An explicit registry holding every headroom collector (never the global one)."""
    registry = CollectorRegistry(auto_describe=False)
    for collector in (*view_collectors(view), stats, InfoCollector(version, interval, window)):
        registry.register(collector)
    return registry
