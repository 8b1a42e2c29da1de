"""The tables from canonical engine metrics to each server's Prometheus names.

Canonical names are the fields of ``monitor.sources.samples.EngineSample`` (gauges and
cumulative counters), the histogram keys of ``EngineSample.histograms``, and
``cache_config_info``. Metric names drift between releases (vLLM's
``gpu_cache_usage_perc`` became ``kv_cache_usage_perc`` and dashboards went
silently empty), so each engine has one ``Flavour`` table per release range,
citing the release its names were taken from. Within a table, each canonical
name lists the server's names in order of preference; the first one present for
an engine wins. A name may carry a label selector (``name{reason="capacity"}``)
to pick some series of a family, or be a ratio of two (``used / max``). Series
that differ only in labels other than the engine's (``finished_reason``, ...)
are summed. ``FIELDS`` are the fields a page is said to lack when it has none of
their names: missing is reported, never read as 0.

Adding a server or a release range is one more table in ``TABLES``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

GAUGES = (
    "running",
    "waiting",
    "waiting_capacity",
    "waiting_deferred",
    "kv_cache_usage",
    "prefix_cache_hit_rate",
    # The sequence cap where the engine itself exports it (Triton's max requests).
    "seq_cap_reported",
)
COUNTERS = (
    "preemptions_total",
    "prompt_tokens_total",
    "generation_tokens_total",
    "request_success_total",
    "admission_rejections_total",
    "estimated_flops_total",
    "estimated_read_bytes_total",
    "estimated_write_bytes_total",
    "prefix_cache_queries_total",
    "prefix_cache_hits_total",
)
HISTOGRAMS = (
    "time_to_first_token_seconds",
    "inter_token_latency_seconds",
    "request_time_per_output_token_seconds",
    "e2e_request_latency_seconds",
    "request_queue_time_seconds",
    "request_prefill_time_seconds",
    "request_decode_time_seconds",
    "iteration_tokens_total",
    "request_num_preemptions",
)
INFO = ("cache_config_info",)
CANONICAL = GAUGES + COUNTERS + HISTOGRAMS + INFO


@dataclass(frozen=True, slots=True)
class Selector:
    """A metric name and the label values its series must have; with ``over``, the ratio
    of its sum to the sum of another selector's series (a usage from used and max)."""

    name: str
    labels: tuple[tuple[str, str], ...] = ()
    over: Selector | None = None

    def matches(self, labels: Mapping[str, str]) -> bool:
        if not self.labels:  # most selectors: every series of the name (checked per sample)
            return True
        return all(labels.get(k) == v for k, v in self.labels)


_SELECTOR = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?$")
_MATCHER = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)="([^"]*)"\s*(?:,|$)')


def selector(spec: str) -> Selector:
    """Parse ``name``, ``name{label="value",...}``, or ``A / B`` of two of those."""
    if " / " in spec:
        num, _, den = spec.partition(" / ")
        top, bottom = selector(num.strip()), selector(den.strip())
        return Selector(top.name, top.labels, bottom)
    m = _SELECTOR.match(spec)
    if m is None:
        raise ValueError(f"bad metric selector {spec!r}")
    labels = tuple(_MATCHER.findall(m.group(2) or ""))
    return Selector(m.group(1), labels)


_VLLM_KV_ROOM = "raise --gpu-memory-utilization, use --kv-cache-dtype fp8 or lower --max-model-len"


@dataclass(frozen=True, slots=True)
class Flavour:
    """One engine's names over one range of its releases."""

    name: str  # EngineSample.flavour: the engine, whatever the version
    title: str  # for messages: "vLLM"
    prefix: str  # every family of this server starts with it
    # Labels that tell one engine (data-parallel rank, ...) of a model from another.
    engine_labels: tuple[str, ...]
    names: Mapping[str, tuple[Selector, ...]]
    version: str = ""  # EngineSample.flavour_version: the releases this table is for
    model_label: str = "model_name"
    # Labels of an info metric that describe the series, not the config.
    info_skip_labels: frozenset[str] = field(default_factory=frozenset)
    # Families read for nothing but telling this version range from its neighbours.
    markers: frozenset[str] = field(default_factory=frozenset)
    # Where the server serves Prometheus text when the user gives no path.
    path: str = "/metrics"
    # The server's settings for its sequence cap and its KV room, for the diagnosis's fixes.
    seq_cap_setting: str = "--max-num-seqs"
    kv_room: str = _VLLM_KV_ROOM

    def candidates(self, canonical: str) -> tuple[Selector, ...]:
        return self.names.get(canonical, ())

    def metric_names(self) -> frozenset[str]:
        """Base names of every family this flavour reads or detects by."""
        names = {sel.name for sels in self.names.values() for sel in sels}
        names |= {sel.over.name for sels in self.names.values() for sel in sels if sel.over}
        return frozenset(names) | self.markers

    @property
    def label(self) -> str:
        """ "vLLM 0.10.2+ (V1)": the engine and the releases, for messages."""
        return f"{self.title} {self.version}".strip()


def _flavour(
    name: str,
    title: str,
    prefix: str,
    engine_labels: tuple[str, ...],
    table: Mapping[str, tuple[str, ...]],
    *,
    version: str,
    model_label: str = "model_name",
    markers: tuple[str, ...] = (),
    path: str = "/metrics",
    seq_cap_setting: str = "--max-num-seqs",
    kv_room: str = "",
) -> Flavour:
    unknown = set(table) - set(CANONICAL)
    if unknown:
        raise ValueError(f"{name}: not canonical names: {sorted(unknown)}")
    names = {k: tuple(selector(s) for s in v) for k, v in table.items() if v}
    return Flavour(
        name=name,
        title=title,
        prefix=prefix,
        engine_labels=engine_labels,
        names=MappingProxyType(names),
        version=version,
        model_label=model_label,
        info_skip_labels=frozenset((model_label, *engine_labels)),
        markers=frozenset(markers),
        path=path,
        seq_cap_setting=seq_cap_setting,
        kv_room=kv_room or _VLLM_KV_ROOM,
    )


# --- vLLM ---------------------------------------------------------------------------
# Names as in vLLM's docs/usage/metrics.md and vllm/engine/metrics.py (V0) and
# vllm/v1/metrics/loggers.py (V1) of each release. Every family is labelled
# model_name, and from V1 on engine (one per data-parallel rank).
_VLLM_COMMON = {
    "running": ("vllm:num_requests_running",),
    "waiting": ("vllm:num_requests_waiting",),
    "preemptions_total": ("vllm:num_preemptions_total",),
    "prompt_tokens_total": ("vllm:prompt_tokens_total",),
    "generation_tokens_total": ("vllm:generation_tokens_total",),
    "request_success_total": ("vllm:request_success_total",),
    "time_to_first_token_seconds": ("vllm:time_to_first_token_seconds",),
    "e2e_request_latency_seconds": ("vllm:e2e_request_latency_seconds",),
    "request_queue_time_seconds": ("vllm:request_queue_time_seconds",),
    "request_prefill_time_seconds": ("vllm:request_prefill_time_seconds",),
    "request_decode_time_seconds": ("vllm:request_decode_time_seconds",),
    "iteration_tokens_total": ("vllm:iteration_tokens_total",),
    "cache_config_info": ("vllm:cache_config_info",),
}

# 0.10.2 renamed gpu_cache_usage_perc to kv_cache_usage_perc and gpu_prefix_cache_* to
# prefix_cache_*; 0.11 dropped the V0 engine and named the inter-token histogram
# inter_token_latency_seconds (time_per_output_token_seconds before). The old names
# stay as second choices: --show-hidden-metrics-for-version brings them back.
VLLM = _flavour(
    "vllm",
    "vLLM",
    "vllm:",
    ("engine",),
    {
        **_VLLM_COMMON,
        "waiting_capacity": ('vllm:num_requests_waiting_by_reason{reason="capacity"}',),
        "waiting_deferred": ('vllm:num_requests_waiting_by_reason{reason="deferred"}',),
        # A ratio 0-1 despite "perc".
        "kv_cache_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
        "prefix_cache_queries_total": (
            "vllm:prefix_cache_queries_total",
            "vllm:gpu_prefix_cache_queries_total",
        ),
        "prefix_cache_hits_total": (
            "vllm:prefix_cache_hits_total",
            "vllm:gpu_prefix_cache_hits_total",
        ),
        "admission_rejections_total": ("vllm:admission_rejections_total",),
        "estimated_flops_total": ("vllm:estimated_flops_per_gpu_total",),
        "estimated_read_bytes_total": ("vllm:estimated_read_bytes_per_gpu_total",),
        "estimated_write_bytes_total": ("vllm:estimated_write_bytes_per_gpu_total",),
        "inter_token_latency_seconds": (
            "vllm:inter_token_latency_seconds",
            "vllm:time_per_output_token_seconds",
        ),
        "request_time_per_output_token_seconds": ("vllm:request_time_per_output_token_seconds",),
        "request_num_preemptions": ("vllm:request_num_preemptions",),
    },
    version="0.10.2+ (V1)",
    markers=("vllm:kv_cache_usage_perc", "vllm:prefix_cache_queries_total"),
)

# The V1 engine before the renames (default from 0.8; 0.8.0 to 0.10.1).
VLLM_V1_EARLY = _flavour(
    "vllm",
    "vLLM",
    "vllm:",
    ("engine",),
    {
        **_VLLM_COMMON,
        "kv_cache_usage": ("vllm:gpu_cache_usage_perc",),
        "prefix_cache_queries_total": ("vllm:gpu_prefix_cache_queries_total",),
        "prefix_cache_hits_total": ("vllm:gpu_prefix_cache_hits_total",),
        "inter_token_latency_seconds": ("vllm:time_per_output_token_seconds",),
        "request_time_per_output_token_seconds": ("vllm:request_time_per_output_token_seconds",),
    },
    version="0.8-0.10.1 (V1)",
    markers=("vllm:gpu_prefix_cache_queries_total",),
)

# The V0 engine (0.6 to 0.10; the default until 0.8): swapping to CPU, a prefix-cache
# hit-rate gauge instead of counters, no engine label.
VLLM_V0 = _flavour(
    "vllm",
    "vLLM",
    "vllm:",
    ("engine",),
    {
        **_VLLM_COMMON,
        "kv_cache_usage": ("vllm:gpu_cache_usage_perc",),
        "prefix_cache_hit_rate": ("vllm:gpu_prefix_cache_hit_rate",),
        "inter_token_latency_seconds": ("vllm:time_per_output_token_seconds",),
    },
    version="0.6-0.10 (V0)",
    markers=("vllm:num_requests_swapped", "vllm:cpu_cache_usage_perc"),
)

_SGLANG_KV_ROOM = "raise --mem-fraction-static or use --kv-cache-dtype fp8_e5m2"
_TRTLLM_KV_ROOM = "raise kv_cache_config.free_gpu_memory_fraction or use an FP8 KV cache"

# --- SGLang -------------------------------------------------------------------------
# python/sglang/srt/metrics/collector.py; served only with --enable-metrics. Scheduler
# gauges carry tp_rank/pp_rank (and dp_rank with data parallelism); the tokenizer's
# counters and latency histograms only model_name, so they attach to the first engine.
_SGLANG_COMMON = {
    "running": ("sglang:num_running_reqs",),
    "waiting": ("sglang:num_queue_reqs",),
    # The share of the KV token pool in use, 0-1. On hybrid models (SWA, Mamba) it is
    # the fullest of the pools, so it can read full while the attention KV is not.
    "kv_cache_usage": ("sglang:token_usage",),
    "prefix_cache_hit_rate": ("sglang:cache_hit_rate",),
    "prompt_tokens_total": ("sglang:prompt_tokens_total",),
    "generation_tokens_total": ("sglang:generation_tokens_total",),
    "request_success_total": ("sglang:num_requests_total",),
    "time_to_first_token_seconds": ("sglang:time_to_first_token_seconds",),
    "e2e_request_latency_seconds": ("sglang:e2e_request_latency_seconds",),
}

# 0.4.7 on: the inter-token histogram is inter_token_latency_seconds, the scheduler
# exports a queue-time histogram and counts retractions (its preemptions: a running
# request sent back to the queue when KV runs out).
SGLANG = _flavour(
    "sglang",
    "SGLang",
    "sglang:",
    ("dp_rank", "tp_rank", "pp_rank"),
    {
        **_SGLANG_COMMON,
        "inter_token_latency_seconds": (
            "sglang:inter_token_latency_seconds",
            "sglang:time_per_output_token_seconds",
        ),
        "preemptions_total": ("sglang:num_retracted_requests_total",),
        "request_queue_time_seconds": ("sglang:queue_time_seconds",),
        "request_num_preemptions": ("sglang:num_retractions",),
    },
    version="0.4.7+",
    markers=("sglang:inter_token_latency_seconds", "sglang:queue_time_seconds"),
    seq_cap_setting="--max-running-requests",
    kv_room=_SGLANG_KV_ROOM,
)

# 0.3 to 0.4.6: time_per_output_token_seconds, no queue-time histogram, no retraction
# counter.
SGLANG_EARLY = _flavour(
    "sglang",
    "SGLang",
    "sglang:",
    ("dp_rank", "tp_rank", "pp_rank"),
    {
        **_SGLANG_COMMON,
        "inter_token_latency_seconds": ("sglang:time_per_output_token_seconds",),
    },
    version="0.3-0.4.6",
    markers=("sglang:time_per_output_token_seconds",),
    seq_cap_setting="--max-running-requests",
    kv_room=_SGLANG_KV_ROOM,
)

# --- TGI ----------------------------------------------------------------------------
# text-generation-inference's router (router/src/{infer,queue,server}.rs), 1.0 to 3.x:
# the Rust metrics crate's exporter, histograms with buckets, counters without
# "_total", no model or engine label. It keeps no KV-cache gauge (its block allocator
# is not exported; tgi_batch_current_max_tokens is a token budget, not a usage) and no
# time-to-first-token histogram; token counts are the sums of per-request histograms.
TGI = _flavour(
    "tgi",
    "TGI",
    "tgi_",
    (),
    {
        "running": ("tgi_batch_current_size",),
        "waiting": ("tgi_queue_size",),
        "request_success_total": ("tgi_request_success", "tgi_request_success_total"),
        "prompt_tokens_total": ("tgi_request_input_length_sum",),
        "generation_tokens_total": ("tgi_request_generated_tokens_sum",),
        "e2e_request_latency_seconds": ("tgi_request_duration",),
        "request_queue_time_seconds": ("tgi_request_queue_duration",),
        "request_time_per_output_token_seconds": ("tgi_request_mean_time_per_token_duration",),
    },
    version="1.0-3.x",
    model_label="",
    seq_cap_setting="--max-batch-size",
    kv_room="raise --max-batch-total-tokens or lower --max-total-tokens",
)

# --- TensorRT-LLM trtllm-serve ------------------------------------------------------
# tensorrt_llm/metrics/collector.py, served at /prometheus/metrics (its /metrics is a
# JSON list of iteration stats); labels model_name and engine_type.
_TRTLLM_LATENCY = {
    "request_success_total": ("trtllm_request_success_total",),
    "e2e_request_latency_seconds": ("trtllm_e2e_request_latency_seconds",),
    "time_to_first_token_seconds": ("trtllm_time_to_first_token_seconds",),
    "inter_token_latency_seconds": ("trtllm_time_per_output_token_seconds",),
    "request_queue_time_seconds": ("trtllm_request_queue_time_seconds",),
}

# 1.2 on: the scheduler's gauges and the token counters joined the latency histograms.
TRTLLM = _flavour(
    "trtllm",
    "TensorRT-LLM",
    "trtllm_",
    (),
    {
        **_TRTLLM_LATENCY,
        "running": ("trtllm_num_requests_running",),
        "waiting": ("trtllm_num_requests_waiting",),
        "kv_cache_usage": ("trtllm_kv_cache_utilization",),
        "prefix_cache_hit_rate": ("trtllm_kv_cache_hit_rate",),
        "prompt_tokens_total": ("trtllm_prompt_tokens_total",),
        "generation_tokens_total": ("trtllm_generation_tokens_total",),
        "request_prefill_time_seconds": ("trtllm_request_prefill_time_seconds",),
        "request_decode_time_seconds": ("trtllm_request_decode_time_seconds",),
    },
    version="1.2+",
    path="/prometheus/metrics",
    seq_cap_setting="--max_batch_size",
    kv_room=_TRTLLM_KV_ROOM,
)

# 1.0 to 1.1: five request metrics only; nothing says how many run or wait.
TRTLLM_EARLY = _flavour(
    "trtllm",
    "TensorRT-LLM",
    "trtllm_",
    (),
    dict(_TRTLLM_LATENCY),
    version="1.0-1.1",
    path="/prometheus/metrics",
    seq_cap_setting="--max_batch_size",
    kv_room=_TRTLLM_KV_ROOM,
)

# --- Triton with the TensorRT-LLM backend --------------------------------------------
# tensorrtllm_backend's inflight_batcher_llm/src/custom_metrics_reporter: gauges only,
# one family per kind with the kind in a label; labels model and version (of the Triton
# model, which we take as the engine). "scheduled" is what runs this iteration ("active"
# also counts requests paused between steps). No token counters, no latency histograms:
# Triton's own nv_inference_* counters are per model in microseconds, not per request.

# The KV block family gained kv_cache_block_type="fraction" in 0.12 (Triton 24.08); before,
# used over max blocks is the same share. The families did not change otherwise, so one
# table covers 0.5 (23.10) on, and the version cannot be told from the page.
TRITON_TRTLLM = _flavour(
    "triton-trtllm",
    "Triton TensorRT-LLM",
    "nv_trt_llm_",
    ("version",),
    {
        "running": ('nv_trt_llm_request_metrics{request_type="scheduled"}',),
        "waiting": ('nv_trt_llm_request_metrics{request_type="waiting"}',),
        # The batch manager's capacity: its max_batch_size, the sequence cap.
        "seq_cap_reported": ('nv_trt_llm_request_metrics{request_type="max"}',),
        "kv_cache_usage": (
            'nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="fraction"}',
            'nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="used"}'
            ' / nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="max"}',
        ),
    },
    version="23.10+",
    model_label="model",
    seq_cap_setting="max_batch_size in config.pbtxt",
    kv_room="raise kv_cache_free_gpu_mem_fraction in config.pbtxt or use an FP8 KV cache",
)

# --- llama.cpp llama-server --metrics ----------------------------------------------
# tools/server/server-task.cpp (examples/server/server.cpp before the move): plain
# counters and gauges, no labels, no histograms. Slots (--parallel N) are its sequence
# cap; a request with no free slot is "deferred".
_LLAMACPP_COMMON = {
    "running": ("llamacpp:requests_processing",),
    "waiting": ("llamacpp:requests_deferred",),
    "prompt_tokens_total": ("llamacpp:prompt_tokens_total",),
    "generation_tokens_total": ("llamacpp:tokens_predicted_total",),
}

# Builds from mid 2025: the KV gauges (kv_cache_usage_ratio, kv_cache_tokens) went with the
# KV-cache rework, and a cached-prompt counter and n_tokens_max came. The build vendored
# by llama-cpp-python 0.3.36, which the tests build and run, is one of these.
LLAMACPP = _flavour(
    "llamacpp",
    "llama.cpp",
    "llamacpp:",
    (),
    dict(_LLAMACPP_COMMON),
    version="mid-2025+ (no KV gauge)",
    model_label="",
    markers=("llamacpp:prompt_tokens_cached_total", "llamacpp:n_tokens_max"),
    seq_cap_setting="--parallel",
    kv_room="raise --ctx-size (shared by the slots) or quantise the KV cache (--cache-type-k q8_0)",
)

LLAMACPP_EARLY = _flavour(
    "llamacpp",
    "llama.cpp",
    "llamacpp:",
    (),
    {
        **_LLAMACPP_COMMON,
        "kv_cache_usage": ("llamacpp:kv_cache_usage_ratio",),
    },
    version="2024-mid-2025",
    model_label="",
    markers=("llamacpp:kv_cache_tokens",),
    seq_cap_setting="--parallel",
    kv_room="raise --ctx-size (shared by the slots) or quantise the KV cache (--cache-type-k q8_0)",
)

# Every table, each engine's newest first: detection breaks full ties toward the newer.
TABLES: tuple[Flavour, ...] = (
    VLLM,
    VLLM_V1_EARLY,
    VLLM_V0,
    SGLANG,
    SGLANG_EARLY,
    TGI,
    TRTLLM,
    TRTLLM_EARLY,
    TRITON_TRTLLM,
    LLAMACPP,
    LLAMACPP_EARLY,
)


def _by_engine() -> Mapping[str, tuple[Flavour, ...]]:
    out: dict[str, list[Flavour]] = {}
    for t in TABLES:
        out.setdefault(t.name, []).append(t)
    return MappingProxyType({k: tuple(v) for k, v in out.items()})


# Engine name -> its tables, newest first.
FLAVOURS: Mapping[str, tuple[Flavour, ...]] = _by_engine()


def flavour(name: str) -> tuple[Flavour, ...]:
    """The tables of one engine (``--engine NAME``), newest first."""
    try:
        return FLAVOURS[name]
    except KeyError:
        known = ", ".join(FLAVOURS)
        raise ValueError(f"unknown engine {name!r} (known: {known})") from None


def table(name: str, version: str | None) -> Flavour | None:
    """The table an EngineSample was read with, from its flavour and flavour_version."""
    for t in FLAVOURS.get(name, ()):
        if version is None or t.version == version:
            return t
    return None


def all_metric_names() -> frozenset[str]:
    """Base names of every family any table reads."""
    out: set[str] = set()
    for t in TABLES:
        out |= t.metric_names()
    return frozenset(out)


# --- what a page lacks ----------------------------------------------------------------
# The fields the snapshot says are missing when an engine's page does not give them:
# each is met by any one of its canonical names.
FIELDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("running", ("running",)),
    ("waiting", ("waiting",)),
    ("kv_cache_usage", ("kv_cache_usage",)),
    ("preemptions", ("preemptions_total",)),
    ("prompt_tokens", ("prompt_tokens_total",)),
    ("generation_tokens", ("generation_tokens_total",)),
    ("requests_completed", ("request_success_total",)),
    ("ttft", ("time_to_first_token_seconds",)),
    ("itl", ("inter_token_latency_seconds", "request_time_per_output_token_seconds")),
    ("e2e_latency", ("e2e_request_latency_seconds",)),
    ("queue_time", ("request_queue_time_seconds",)),
    ("prefix_cache_hits", ("prefix_cache_hits_total", "prefix_cache_hit_rate")),
    ("step_tokens", ("iteration_tokens_total",)),
)


def selector_text(sel: Selector) -> str:
    text = sel.name
    if sel.labels:
        text += "{" + ",".join(f'{k}="{v}"' for k, v in sel.labels) + "}"
    if sel.over is not None:
        text += " / " + selector_text(sel.over)
    return text


def looked_for(t: Flavour, canonicals: tuple[str, ...]) -> tuple[str, ...]:
    """The server names a table looks for to fill a field: empty when it exports none."""
    return tuple(selector_text(sel) for c in canonicals for sel in t.candidates(c))
