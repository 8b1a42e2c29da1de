"""The one table from canonical engine metrics to each server's Prometheus names.

Canonical names are the fields of ``monitor.samples.EngineSample`` (gauges and
cumulative counters), the histogram keys of ``EngineSample.histograms``, and
``cache_config_info``. Each flavour lists, per canonical name, the server's
names in order of preference (the newest first, older aliases after); the first
one present for an engine wins. A name may carry a label selector
(``name{reason="capacity"}``) to pick some series of a family. Series that
differ only in labels other than the engine's (``finished_reason``, ...) are
summed.

Adding a server is one more ``Flavour`` entry in ``FLAVOURS``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

GAUGES = ("running", "waiting", "waiting_capacity", "waiting_deferred", "kv_cache_usage")
COUNTERS = (
    "preemptions_total",
    "prompt_tokens_total",
    "generation_tokens_total",
    "request_success_total",
    "admission_rejections_total",
    "estimated_flops_total",
    "estimated_read_bytes_total",
    "estimated_write_bytes_total",
    # Prefix cache, in prompt tokens: looked up, and found already computed.
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
    """A metric name and the label values its series must have."""

    name: str
    labels: tuple[tuple[str, str], ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        if not self.labels:  # most selectors: every series of the name (checked per sample)
            return True
        return all(labels.get(k) == v for k, v in self.labels)


_SELECTOR = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?$")
_MATCHER = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)="([^"]*)"\s*(?:,|$)')


def selector(spec: str) -> Selector:
    """Parse ``name`` or ``name{label="value",...}``."""
    m = _SELECTOR.match(spec)
    if m is None:
        raise ValueError(f"bad metric selector {spec!r}")
    labels = tuple(_MATCHER.findall(m.group(2) or ""))
    return Selector(m.group(1), labels)


@dataclass(frozen=True, slots=True)
class Flavour:
    name: str  # EngineSample.flavour
    title: str  # for messages: "vLLM"
    prefix: str  # every family of this server starts with it
    # Labels that tell one engine (data-parallel rank, ...) of a model from another.
    engine_labels: tuple[str, ...]
    names: Mapping[str, tuple[Selector, ...]]
    model_label: str = "model_name"
    # Labels of an info metric that describe the series, not the config.
    info_skip_labels: frozenset[str] = field(default_factory=frozenset)

    def candidates(self, canonical: str) -> tuple[Selector, ...]:
        return self.names.get(canonical, ())

    def metric_names(self) -> frozenset[str]:
        """Base names of every family this flavour reads."""
        return frozenset(sel.name for sels in self.names.values() for sel in sels)


def _flavour(
    name: str,
    title: str,
    prefix: str,
    engine_labels: tuple[str, ...],
    table: Mapping[str, tuple[str, ...]],
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
        info_skip_labels=frozenset(("model_name", *engine_labels)),
    )


VLLM = _flavour(
    "vllm",
    "vLLM",
    "vllm:",
    ("engine",),
    {
        "running": ("vllm:num_requests_running",),
        "waiting": ("vllm:num_requests_waiting",),
        "waiting_capacity": ('vllm:num_requests_waiting_by_reason{reason="capacity"}',),
        "waiting_deferred": ('vllm:num_requests_waiting_by_reason{reason="deferred"}',),
        # A ratio 0-1 despite "perc"; gpu_cache_usage_perc is the V0 engine's name.
        "kv_cache_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
        "preemptions_total": ("vllm:num_preemptions_total",),
        "prompt_tokens_total": ("vllm:prompt_tokens_total",),
        "generation_tokens_total": ("vllm:generation_tokens_total",),
        "request_success_total": ("vllm:request_success_total",),
        "admission_rejections_total": ("vllm:admission_rejections_total",),
        "estimated_flops_total": ("vllm:estimated_flops_per_gpu_total",),
        "estimated_read_bytes_total": ("vllm:estimated_read_bytes_per_gpu_total",),
        "estimated_write_bytes_total": ("vllm:estimated_write_bytes_per_gpu_total",),
        # V0 engines exported only a gauge (gpu_prefix_cache_hit_rate): not read, a rate
        # over a window needs the counters.
        "prefix_cache_queries_total": ("vllm:prefix_cache_queries_total",),
        "prefix_cache_hits_total": ("vllm:prefix_cache_hits_total",),
        "time_to_first_token_seconds": ("vllm:time_to_first_token_seconds",),
        # Before inter_token_latency_seconds, vLLM called the inter-token gap this.
        "inter_token_latency_seconds": (
            "vllm:inter_token_latency_seconds",
            "vllm:time_per_output_token_seconds",
        ),
        "request_time_per_output_token_seconds": ("vllm:request_time_per_output_token_seconds",),
        "e2e_request_latency_seconds": ("vllm:e2e_request_latency_seconds",),
        "request_queue_time_seconds": ("vllm:request_queue_time_seconds",),
        "request_prefill_time_seconds": ("vllm:request_prefill_time_seconds",),
        "request_decode_time_seconds": ("vllm:request_decode_time_seconds",),
        "iteration_tokens_total": ("vllm:iteration_tokens_total",),
        "request_num_preemptions": ("vllm:request_num_preemptions",),
        "cache_config_info": ("vllm:cache_config_info",),
    },
)

# SGLang (python/sglang/srt/metrics/collector.py). Scheduler gauges carry
# tp_rank/pp_rank (and dp_rank with data parallelism); the tokenizer's counters
# and latency histograms only model_name, so they attach to the first engine.
SGLANG = _flavour(
    "sglang",
    "SGLang",
    "sglang:",
    ("dp_rank", "tp_rank", "pp_rank"),
    {
        "running": ("sglang:num_running_reqs",),
        "waiting": ("sglang:num_queue_reqs",),
        # The share of the KV token pool in use, 0-1.
        "kv_cache_usage": ("sglang:token_usage",),
        # SGLang "retracts" a running request when KV runs out: vLLM's preemption.
        "preemptions_total": ("sglang:num_retracted_requests_total",),
        "prompt_tokens_total": ("sglang:prompt_tokens_total",),
        "generation_tokens_total": ("sglang:generation_tokens_total",),
        "request_success_total": ("sglang:num_requests_total",),
        "time_to_first_token_seconds": ("sglang:time_to_first_token_seconds",),
        "inter_token_latency_seconds": (
            "sglang:inter_token_latency_seconds",
            "sglang:time_per_output_token_seconds",
        ),
        "e2e_request_latency_seconds": ("sglang:e2e_request_latency_seconds",),
        "request_queue_time_seconds": ("sglang:queue_time_seconds",),
        "request_num_preemptions": ("sglang:num_retractions",),
    },
)

FLAVOURS: Mapping[str, Flavour] = MappingProxyType({f.name: f for f in (VLLM, SGLANG)})


def flavour(name: str) -> Flavour:
    try:
        return FLAVOURS[name]
    except KeyError:
        known = ", ".join(sorted(FLAVOURS))
        raise ValueError(f"unknown server flavour {name!r} (known: {known})") from None


def all_metric_names() -> frozenset[str]:
    """Base names of every family any flavour reads."""
    out: set[str] = set()
    for f in FLAVOURS.values():
        out |= f.metric_names()
    return frozenset(out)
