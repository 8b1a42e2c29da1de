"""The engine's cumulative counters and histograms, in vLLM's buckets.

They outlive a scenario switch, as a server's counters outlive a config change:
a monitor sees rates change, never a counter reset.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from dataclasses import dataclass, field

# vLLM 0.32's buckets (tests/fixtures/vllm-0.32.0-cpu-metrics-under-load.txt).
TOKEN_BUCKETS = (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0)
ITERATION_BUCKETS = (1.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0)  # fmt: skip
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)  # fmt: skip
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)  # fmt: skip
REQUEST_TIME_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)  # fmt: skip
PREEMPTION_BUCKETS = (1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 20.0)
N_BUCKETS = (1.0, 2.0, 5.0, 10.0, 20.0)

FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")


@dataclass(slots=True)
class Hist:
    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)  # per bucket (not cumulative), + the +Inf one
    sum: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, value: float) -> None:
        # Prometheus buckets are "less than or equal": bisect_left puts value == bound inside.
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.count += 1

    def cumulative(self) -> list[tuple[float, int]]:
        out, acc = [], 0
        for bound, n in zip((*self.bounds, float("inf")), self.counts):
            acc += n
            out.append((bound, acc))
        return out

    def copy(self) -> Hist:
        return Hist(self.bounds, list(self.counts), self.sum, self.count)


HISTOGRAMS: dict[str, tuple[tuple[float, ...], str]] = {
    "request_prompt_tokens": (TOKEN_BUCKETS, "Number of prefill tokens processed."),
    "request_generation_tokens": (TOKEN_BUCKETS, "Number of generation tokens processed."),
    "iteration_tokens_total": (ITERATION_BUCKETS, "Histogram of number of tokens per engine_step."),
    "request_max_num_generation_tokens": (TOKEN_BUCKETS, "Histogram of maximum number of requested generation tokens."),
    "request_params_n": (N_BUCKETS, "Histogram of the n request parameter."),
    "request_params_max_tokens": (TOKEN_BUCKETS, "Histogram of the max_tokens request parameter."),
    "time_to_first_token_seconds": (TTFT_BUCKETS, "Histogram of time to first token in seconds."),
    "inter_token_latency_seconds": (ITL_BUCKETS, "Histogram of inter-token latency in seconds."),
    "request_time_per_output_token_seconds": (ITL_BUCKETS, "Histogram of time_per_output_token_seconds per request."),
    "e2e_request_latency_seconds": (REQUEST_TIME_BUCKETS, "Histogram of e2e request latency in seconds."),
    "request_queue_time_seconds": (REQUEST_TIME_BUCKETS, "Histogram of time spent in WAITING phase for request."),
    "request_inference_time_seconds": (REQUEST_TIME_BUCKETS, "Histogram of time spent in RUNNING phase for request."),
    "request_prefill_time_seconds": (REQUEST_TIME_BUCKETS, "Histogram of time spent in PREFILL phase for request."),
    "request_decode_time_seconds": (REQUEST_TIME_BUCKETS, "Histogram of time spent in DECODE phase for request."),
    "request_num_preemptions": (PREEMPTION_BUCKETS, "Histogram of the number of times a request was preempted."),
    "request_prefill_kv_computed_tokens": (TOKEN_BUCKETS, "Histogram of new KV tokens computed during prefill (excluding cached tokens)."),
}  # fmt: skip


class Stats:
    """Cumulative engine statistics; mutated only under the engine's lock."""

    def __init__(self) -> None:
        self.created = time.time()
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.preemptions = 0
        self.prefix_cache_queries = 0  # prompt tokens looked up in the prefix cache
        self.prefix_cache_hits = 0  # of those, tokens found there
        self.success: dict[str, int] = dict.fromkeys(FINISH_REASONS, 0)
        self.flops = 0.0
        self.read_bytes = 0.0
        self.write_bytes = 0.0
        self.steps = 0
        self.hist: dict[str, Hist] = {name: Hist(b) for name, (b, _) in HISTOGRAMS.items()}

    def observe(self, name: str, value: float) -> None:
        self.hist[name].observe(value)
