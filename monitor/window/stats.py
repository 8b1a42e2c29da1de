"""What a window says, and the one builder of it.

A window of snapshots is kept two ways: recomputed from its snapshots (``monitor.window.full``)
or kept up to date as snapshots enter and leave it (``monitor.window.live``). Each hands the
builders here what it holds of a GPU, an engine or the host (``GpuReadings``,
``EngineReadings``, ``HostReadings``: means, extremes, series, counter increases, histogram
deltas); the builders make the ``GpuWindow``, ``EngineWindow``, ``HostWindow`` and
``WindowStats`` both ways give, so the two cannot drift apart in what a figure means.

GPU and host figures are means over the window. Engine counters become rates
(a decrease between two samples is a server restart: the new value is the
increase since it, as Prometheus's ``rate`` does), and histograms become the
bucket deltas over the window, from which means and quantiles follow.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from operator import itemgetter
from typing import Any, Protocol

from monitor.sources import samples

# Canonical histogram names (see monitor.sources.metric_names).
TTFT = "time_to_first_token_seconds"
ITL = "inter_token_latency_seconds"
TPOT = "request_time_per_output_token_seconds"
E2E = "e2e_request_latency_seconds"
QUEUE = "request_queue_time_seconds"
PREFILL = "request_prefill_time_seconds"
DECODE = "request_decode_time_seconds"
ITERATION_TOKENS = "iteration_tokens_total"
REQUEST_PREEMPTIONS = "request_num_preemptions"


def mean_present(values: Iterable[float | None]) -> float | None:
    """The mean of the values that were read (None when none was)."""
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


def counter_increase(values: Sequence[float | None]) -> float | None:
    """Increase of a cumulative counter over consecutive readings, across resets."""
    present = [v for v in values if v is not None]
    if len(present) < 2:
        return None
    total = 0.0
    for prev, cur in zip(present, present[1:]):
        total += cur - prev if cur >= prev else cur
    return total


def bucket_bounds(h: samples.Histogram) -> tuple[float, ...]:
    return tuple(map(itemgetter(0), h.buckets))


def histogram_delta(hists: Sequence[samples.Histogram | None]) -> samples.Histogram | None:
    """Observations added over consecutive readings of a cumulative histogram.

    Between two readings the buckets can only grow, unless the server restarted: its
    count fell (every bucket of the newer reading is new), or its buckets changed (what
    came before the change is dropped). So a run of readings without either adds its
    last reading less its first, one subtraction per bucket rather than one per pair:
    buckets and counts are whole numbers (exact either way), and a sum rounds once."""
    present = [h for h in hists if h is not None]
    if len(present) < 2:
        return None
    bounds = bucket_bounds(present[-1])
    # Readings before the last one with other buckets are dropped; the one after it counts
    # whole (as after a restart).
    start, base = 0, present[0]
    for i in range(len(present) - 2, -1, -1):
        if bucket_bounds(present[i]) != bounds:
            start, base = i + 1, None
            break
    runs: list[tuple[samples.Histogram | None, samples.Histogram]] = []
    end = present[start]
    for cur in present[start + 1 :]:
        if cur.count < end.count:  # a restart: the run so far ends at the reading before it
            runs.append((base, end))
            base = None
        end = cur
    if not runs:
        return run_delta(bounds, base, end)
    runs.append((base, end))
    acc, total_sum, total_count = _run(*runs[0])
    for run in runs[1:]:
        more, more_sum, more_count = _run(*run)
        acc = [a + m for a, m in zip(acc, more)]
        total_sum += more_sum
        total_count += more_count
    return samples.Histogram(buckets=tuple(zip(bounds, acc)), sum=total_sum, count=total_count)


def run_delta(
    bounds: tuple[float, ...], base: samples.Histogram | None, end: samples.Histogram
) -> samples.Histogram:
    """What a run of readings with ``bounds`` and no restart added: its last reading less
    its first (``base``; None where the run began with a restart, and counts whole)."""
    acc, total_sum, total_count = _run(base, end)
    return samples.Histogram(buckets=tuple(zip(bounds, acc)), sum=total_sum, count=total_count)


def _run(
    base: samples.Histogram | None, end: samples.Histogram
) -> tuple[list[float], float, float]:
    if base is None:
        return [c for _, c in end.buckets], end.sum, end.count
    return (
        [c - b for (_, c), (_, b) in zip(end.buckets, base.buckets)],
        end.sum - base.sum,
        end.count - base.count,
    )


def histogram_quantile(q: float, hist: samples.Histogram | None) -> float | None:
    """Prometheus's ``histogram_quantile``: linear within the bucket holding the rank."""
    if hist is None or hist.count <= 0 or not hist.buckets:
        return None
    rank = q * hist.buckets[-1][1]
    lower_bound, lower_count = 0.0, 0.0
    for le, cum in hist.buckets:
        if cum >= rank:
            if math.isinf(le):
                return lower_bound
            if cum == lower_count:
                return le
            return lower_bound + (le - lower_bound) * (rank - lower_count) / (cum - lower_count)
        lower_bound, lower_count = le, cum
    return lower_bound


def histogram_mean(hist: samples.Histogram | None) -> float | None:
    if hist is None or hist.count <= 0:
        return None
    return hist.sum / hist.count


def histogram_share_at_least(hist: samples.Histogram | None, threshold: float) -> float | None:
    """Share of observations in buckets whose lower bound is >= ``threshold``.

    Used for the token budget: the share of engine steps that filled it.
    """
    if hist is None or hist.count <= 0:
        return None
    below = 0.0
    for le, cum in hist.buckets:
        if le < threshold:
            below = cum
    total = hist.buckets[-1][1]
    return max(0.0, (total - below) / total) if total > 0 else None


@dataclass(frozen=True, slots=True)
class GpuWindow:
    index: int
    uuid: str
    name: str
    source: str
    util: float | None
    util_max: float | None
    mem_util: float | None
    sm_active: float | None
    sm_occupancy: float | None
    tensor_active: float | None
    dram_active: float | None
    fp16_active: float | None
    fp32_active: float | None
    power_watts: float | None
    power_limit_watts: float | None
    sm_clock_hz: float | None
    sm_clock_max_hz: float | None
    throttle_reasons: tuple[str, ...] | None
    temperature_c: float | None
    memory_used_bytes: int | None
    memory_total_bytes: int | None
    pcie_tx_bytes_per_s: float | None
    pcie_rx_bytes_per_s: float | None
    nvlink_tx_bytes_per_s: float | None
    nvlink_rx_bytes_per_s: float | None
    mig_parent: int | None
    labels: tuple[tuple[str, str], ...]
    samples: int
    pcie_link_gen: int | None = None
    pcie_link_width: int | None = None
    driver_util: float | None = None
    mig_instance: int | None = None
    # The latest process list read in the window (None: not read).
    processes: tuple[samples.GpuProcess, ...] | None = None
    # Energy over the window (the increase of the source's counter, across resets), where it
    # comes from ("counter" or "power": see GpuSample), and the counter's newest value.
    energy_joules: float | None = None
    energy_source: str | None = None
    energy_joules_total: float | None = None
    # When the reading energy_joules_total is from was taken (Unix time): the exporter stamps
    # the counter with it, so a rate over two scrapes divides by the time between the two
    # readings, not between the scrapes (a tick late by half an interval read 1.5x the power).
    energy_read_wall: float | None = None

    @property
    def pcie_peak_bytes_per_s(self) -> float | None:
        """One direction's peak of the link, from its generation and width."""
        return pcie_peak_bytes_per_s(self.pcie_link_gen, self.pcie_link_width)

    @property
    def pcie_bytes_per_s(self) -> float | None:
        """The busier direction's throughput (host to device is rx on the GPU)."""
        both = [v for v in (self.pcie_tx_bytes_per_s, self.pcie_rx_bytes_per_s) if v is not None]
        return max(both) if both else None


# Usable bytes/s per lane and direction, by PCIe generation: the transfer rate less line
# coding (8b/10b to Gen 2, 128b/130b from Gen 3; Gen 6's FLIT mode counted as Gen 5 x2).
_PCIE_LANE_BYTES = {1: 0.25e9, 2: 0.5e9, 3: 0.985e9, 4: 1.969e9, 5: 3.938e9, 6: 7.877e9}


def pcie_peak_bytes_per_s(gen: int | None, width: int | None) -> float | None:
    if gen is None or width is None or gen not in _PCIE_LANE_BYTES or width <= 0:
        return None
    return _PCIE_LANE_BYTES[gen] * width


@dataclass(frozen=True, slots=True)
class EngineWindow:
    url: str
    model_name: str
    engine: str
    flavour: str
    elapsed_s: float
    samples: int
    running_mean: float | None
    running_max: float | None
    running_min: float | None
    waiting_mean: float | None
    waiting_max: float | None
    waiting_first: float | None
    waiting_last: float | None
    waiting_capacity_mean: float | None
    waiting_deferred_mean: float | None
    kv_cache_usage_mean: float | None
    kv_cache_usage_max: float | None
    preemptions_per_s: float | None
    prompt_tokens_per_s: float | None
    generation_tokens_per_s: float | None
    requests_per_s: float | None
    admission_rejections_per_s: float | None
    flops_per_s: float | None
    read_bytes_per_s: float | None
    write_bytes_per_s: float | None
    # Share of prompt tokens looked up in the prefix cache that were found there.
    prefix_cache_hit_rate: float | None
    ttft_p50_s: float | None
    ttft_p95_s: float | None
    ttft_mean_s: float | None
    itl_p50_s: float | None
    itl_p95_s: float | None
    tpot_mean_s: float | None
    e2e_mean_s: float | None
    e2e_p50_s: float | None
    e2e_p95_s: float | None
    queue_mean_s: float | None
    prefill_mean_s: float | None
    decode_mean_s: float | None
    iteration_tokens_mean: float | None
    # Per-sample series, oldest first: the plateau of running while waiting > 0 is the sequence cap.
    running_series: tuple[float, ...]
    waiting_series: tuple[float, ...]
    # Histogram deltas over the window, by canonical name.
    histograms: tuple[tuple[str, samples.Histogram], ...]
    cache_config: tuple[tuple[str, str], ...]
    # The caps the engine reported itself, as of the newest sample (None: not asked or not told).
    reported_max_num_seqs: int | None = None
    reported_max_num_batched_tokens: int | None = None
    reported_caps_origin: str = ""
    # The releases whose names matched, and the fields the page lacked (see EngineSample).
    flavour_version: str | None = None
    missing: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # The sequence cap the engine reports, its latest reading (None: not exported).
    seq_cap_reported: float | None = None

    def histogram(self, name: str) -> samples.Histogram | None:
        for key, hist in self.histograms:
            if key == name:
                return hist
        return None

    @property
    def in_flight_mean(self) -> float | None:
        if self.running_mean is None:
            return None
        return self.running_mean + (self.waiting_mean or 0.0)


# EngineWindow's rates: the counter (an EngineSample field) each is the increase of.
RATES = {
    "preemptions_per_s": "preemptions_total",
    "prompt_tokens_per_s": "prompt_tokens_total",
    "generation_tokens_per_s": "generation_tokens_total",
    "requests_per_s": "request_success_total",
    "admission_rejections_per_s": "admission_rejections_total",
    "flops_per_s": "estimated_flops_total",
    "read_bytes_per_s": "estimated_read_bytes_total",
    "write_bytes_per_s": "estimated_write_bytes_total",
}


@dataclass(frozen=True, slots=True)
class ThreadLoad:
    pid: int
    tid: int
    name: str
    cpu_ratio: float  # share of one core


@dataclass(frozen=True, slots=True)
class HostWindow:
    cpu_count: int
    cpu_busy_ratio: float | None  # share of all CPUs busy
    cpu_steal_ratio: float | None
    cpu_freq_mhz: float | None
    cpu_freq_max_mhz: float | None
    engine_cpu_cores: float | None  # CPU of the engine's processes, in cores
    busiest_thread: ThreadLoad | None
    pids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class WindowStats:
    start: float  # monotonic
    end: float
    wall_end: float
    samples: int
    gpus: tuple[GpuWindow, ...]
    engines: tuple[EngineWindow, ...]
    host: HostWindow | None
    errors: tuple[samples.SourceError, ...]  # those of the latest tick
    load: tuple[tuple[str, float], ...]  # means of the load generator's figures
    # The engine thread's latest Python profile (monitor.profiling.stacks.CpuProfile), set
    # by whoever took it (snapshot --profile, the auto-profiler); never computed here.
    cpu_profile: Any = None

    @property
    def duration_s(self) -> float:
        return self.end - self.start


GpuKey = tuple[str, str, int]
EngineKey = tuple[str, str, str]

# How far before the window's baseline snapshot a GPU, engine or the host missing from it
# may reach for its own baseline reading (its newest before that snapshot), in seconds, by
# the name of the source reading it. A source read once every few ticks (monitor.sources
# .paced: an engine page once a second at 200 ms ticks) is missing from most snapshots,
# and a window holding one of its readings gives it no rate; it reaches back one of its
# reads, no further (not across a stall). A source not named here is read every tick: its
# baseline is the window's baseline snapshot, whatever it holds.
Reach = Mapping[str, float]
# The source reading every engine page, whatever the engine (monitor.sources.vllm); GPUs
# carry their source's name (GpuSample.source), the host is read by "host".
ENGINE_SOURCE = "vllm"
HOST_SOURCE = "host"


def gpu_reach(reach: Reach, key: GpuKey) -> float:
    return reach.get(key[0], 0.0)


def engine_reach(reach: Reach) -> float:
    return reach.get(ENGINE_SOURCE, 0.0)


def host_reach(reach: Reach) -> float:
    return reach.get(HOST_SOURCE, 0.0)


def gpu_key(g: samples.GpuSample) -> GpuKey:
    return (g.source, g.uuid, g.index)


def engine_key(e: samples.EngineSample) -> EngineKey:
    return (e.url, e.model_name, e.engine)


GPU_MEANS = (
    "util", "mem_util", "sm_active", "sm_occupancy", "tensor_active", "dram_active",
    "fp16_active", "fp32_active", "power_watts", "sm_clock_hz", "temperature_c",
    "pcie_tx_bytes_per_s", "pcie_rx_bytes_per_s", "nvlink_tx_bytes_per_s",
    "nvlink_rx_bytes_per_s", "driver_util",
)  # fmt: skip
# What a GPU's window takes as its newest reading has it, field for field.
GPU_FROM_LAST = (
    "index", "uuid", "name", "source", "power_limit_watts", "sm_clock_max_hz",
    "memory_used_bytes", "memory_total_bytes", "mig_parent", "mig_instance", "labels",
    "energy_source",
)  # fmt: skip
ENGINE_MEANS = (
    "running", "waiting", "waiting_capacity", "waiting_deferred", "kv_cache_usage",
    "prefix_cache_hit_rate",
)  # fmt: skip
# The counters an engine's window takes the increase of: the rates', and the prefix
# cache's hits over lookups.
ENGINE_COUNTERS = (*RATES.values(), "prefix_cache_hits_total", "prefix_cache_queries_total")


class GpuReadings(Protocol):
    """What a window holds of one GPU, however it keeps it."""

    def last(self) -> samples.GpuSample: ...
    def last_t(self) -> float: ...  # the monotonic time of the newest reading
    def count(self) -> int: ...
    def mean(self, field: str) -> float | None: ...  # a GPU_MEANS field
    def util_max(self) -> float | None: ...
    # Every reason any reading gave, sorted (None: no reading said).
    def throttle_reasons(self) -> tuple[str, ...] | None: ...
    def processes(self) -> tuple[samples.GpuProcess, ...] | None: ...  # the latest list read
    def energy_increase(self) -> float | None: ...


class EngineReadings(Protocol):
    """What a window holds of one engine, however it keeps it."""

    def last(self) -> samples.EngineSample: ...
    def count(self) -> int: ...
    def elapsed(self) -> float: ...  # from its first reading to its last
    def mean(self, field: str) -> float | None: ...  # an ENGINE_MEANS field
    def extreme(self, field: str, most: bool) -> float | None: ...  # running, waiting, kv
    def series(self, field: str) -> tuple[float, ...]: ...  # running or waiting, present
    def increase(self, counter: str) -> float | None: ...  # an ENGINE_COUNTERS counter
    # The histograms' deltas over the window, those of the newest reading's names.
    def deltas(self) -> Mapping[str, samples.Histogram]: ...
    def seq_cap(self) -> float | None: ...  # the newest cap the engine reported


class HostReadings(Protocol):
    """What a window holds of the host: its first and last readings, and the frequency."""

    def first(self) -> samples.HostSample: ...
    def last(self) -> samples.HostSample: ...
    def elapsed(self) -> float: ...
    def freq_mean(self) -> float | None: ...


def gpu_stats(r: GpuReadings, now: samples.Snapshot) -> GpuWindow:
    """A GPU's window: what its newest reading says, and its figures over the window.
    ``now``: the window's newest snapshot, whose clocks date the GPU's newest reading."""
    last = r.last()
    read_wall = None
    if last.energy_joules is not None:
        read_wall = now.wall - (now.t - r.last_t())
    return GpuWindow(
        **{name: getattr(last, name) for name in GPU_FROM_LAST},
        pcie_link_gen=None if last.pcie_link_gen is None else int(last.pcie_link_gen),
        pcie_link_width=None if last.pcie_link_width is None else int(last.pcie_link_width),
        energy_joules_total=last.energy_joules,
        energy_read_wall=read_wall,
        util_max=r.util_max(),
        throttle_reasons=r.throttle_reasons(),
        samples=r.count(),
        processes=r.processes(),
        energy_joules=r.energy_increase(),
        **{name: r.mean(name) for name in GPU_MEANS},
    )


def engine_stats(r: EngineReadings) -> EngineWindow:
    """An engine's window: its newest reading, rates from its counters' increases,
    latencies from its histograms' deltas, and its gauges' means, extremes and series."""
    last = r.last()
    elapsed = r.elapsed()
    deltas = r.deltas()

    def rate(counter: str) -> float | None:
        inc = r.increase(counter)
        if inc is None or elapsed <= 0:
            return None
        return inc / elapsed

    # Hits over lookups from the counters (None when nothing was looked up), else the mean
    # of the engine's own hit-rate gauge (SGLang, trtllm-serve).
    hits = r.increase("prefix_cache_hits_total")
    queries = r.increase("prefix_cache_queries_total")
    if hits is not None and queries is not None:
        hit_rate = min(1.0, max(0.0, hits / queries)) if queries else None
    else:
        hit_rate = r.mean("prefix_cache_hit_rate")
    waiting = r.series("waiting")
    return EngineWindow(
        url=last.url,
        model_name=last.model_name,
        engine=last.engine,
        flavour=last.flavour,
        elapsed_s=elapsed,
        samples=r.count(),
        running_mean=r.mean("running"),
        running_max=r.extreme("running", most=True),
        running_min=r.extreme("running", most=False),
        waiting_mean=r.mean("waiting"),
        waiting_max=r.extreme("waiting", most=True),
        waiting_first=waiting[0] if waiting else None,
        waiting_last=waiting[-1] if waiting else None,
        waiting_capacity_mean=r.mean("waiting_capacity"),
        waiting_deferred_mean=r.mean("waiting_deferred"),
        kv_cache_usage_mean=r.mean("kv_cache_usage"),
        kv_cache_usage_max=r.extreme("kv_cache_usage", most=True),
        **{name: rate(counter) for name, counter in RATES.items()},
        prefix_cache_hit_rate=hit_rate,
        ttft_p50_s=histogram_quantile(0.5, deltas.get(TTFT)),
        ttft_p95_s=histogram_quantile(0.95, deltas.get(TTFT)),
        ttft_mean_s=histogram_mean(deltas.get(TTFT)),
        itl_p50_s=histogram_quantile(0.5, deltas.get(ITL)),
        itl_p95_s=histogram_quantile(0.95, deltas.get(ITL)),
        tpot_mean_s=histogram_mean(deltas.get(TPOT)),
        e2e_mean_s=histogram_mean(deltas.get(E2E)),
        e2e_p50_s=histogram_quantile(0.5, deltas.get(E2E)),
        e2e_p95_s=histogram_quantile(0.95, deltas.get(E2E)),
        queue_mean_s=histogram_mean(deltas.get(QUEUE)),
        prefill_mean_s=histogram_mean(deltas.get(PREFILL)),
        decode_mean_s=histogram_mean(deltas.get(DECODE)),
        iteration_tokens_mean=histogram_mean(deltas.get(ITERATION_TOKENS)),
        running_series=r.series("running"),
        waiting_series=waiting,
        histograms=tuple(sorted(deltas.items())),
        cache_config=last.cache_config,
        reported_max_num_seqs=_int_or_none(last.reported_max_num_seqs),
        reported_max_num_batched_tokens=_int_or_none(last.reported_max_num_batched_tokens),
        reported_caps_origin=last.reported_caps_origin,
        flavour_version=last.flavour_version,
        missing=last.missing,
        seq_cap_reported=r.seq_cap(),
    )


def _int_or_none(v: float | None) -> int | None:
    return None if v is None else int(v)


def host_stats(r: HostReadings) -> HostWindow:
    """The host's window: CPU shares and the engine's cores from the first and last
    readings, the frequency's mean over the window."""
    first, last = r.first(), r.last()
    elapsed = r.elapsed()
    busy = steal = None
    total = last.cpu_total_seconds - first.cpu_total_seconds
    if total > 0:
        idle = last.cpu_idle_seconds - first.cpu_idle_seconds
        busy = min(1.0, max(0.0, 1.0 - idle / total))
        if first.cpu_steal_seconds is not None and last.cpu_steal_seconds is not None:
            steal = min(1.0, max(0.0, (last.cpu_steal_seconds - first.cpu_steal_seconds) / total))
    engine_cores = None
    busiest: ThreadLoad | None = None
    if elapsed > 0 and last.processes:
        before = {p.pid: p for p in first.processes}
        engine_cores = 0.0
        for proc in last.processes:
            prev = before.get(proc.pid)
            if prev is None:
                continue  # appeared within the window: no baseline, do not guess
            engine_cores += max(0.0, proc.cpu_seconds - prev.cpu_seconds) / elapsed
            prev_threads = {t.tid: t for t in prev.threads}
            for th in proc.threads:
                pt = prev_threads.get(th.tid)
                if pt is None:
                    continue
                ratio = max(0.0, th.cpu_seconds - pt.cpu_seconds) / elapsed
                if busiest is None or ratio > busiest.cpu_ratio:
                    busiest = ThreadLoad(proc.pid, th.tid, th.name, ratio)
    return HostWindow(
        cpu_count=last.cpu_count,
        cpu_busy_ratio=busy,
        cpu_steal_ratio=steal,
        cpu_freq_mhz=r.freq_mean(),
        cpu_freq_max_mhz=last.cpu_freq_max_mhz,
        engine_cpu_cores=engine_cores,
        busiest_thread=busiest,
        pids=tuple(p.pid for p in last.processes),
    )


def empty_stats(t: float = 0.0) -> WindowStats:
    return WindowStats(t, t, 0.0, 0, (), (), None, (), ())


def window_stats(
    first: samples.Snapshot,
    last: samples.Snapshot,
    count: int,
    gpus: Mapping[GpuKey, GpuReadings],
    engines: Iterable[EngineReadings],
    host: HostReadings | None,
    load: Iterable[tuple[str, float]],
) -> WindowStats:
    """The window from its first and last snapshots, what it holds of each GPU (listed by
    index, then uuid), each engine (in the order given: as each first appears) and the
    host, and the load generator's means."""
    return WindowStats(
        start=first.t,
        end=last.t,
        wall_end=last.wall,
        samples=count,
        gpus=tuple(gpu_stats(gpus[k], last) for k in sorted(gpus, key=lambda k: (k[2], k[1]))),
        engines=tuple(engine_stats(e) for e in engines),
        host=host_stats(host) if host is not None else None,
        errors=last.errors,
        load=tuple(load),
    )


def field_names(cls: type) -> list[str]:
    return [f.name for f in fields(cls)]
