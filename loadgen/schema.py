"""Versioned sweep schemas: what a sweep was asked to do and what it found.

``sweep.json`` and each line of ``steps.jsonl`` are these models dumped to
JSON; scripts read them, so add fields, never rename them, and bump
``SCHEMA_VERSION`` when a meaning changes.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = 1

Mode = Literal["closed", "open"]
Api = Literal["completions", "chat"]


class WorkerConfig(BaseModel):
    """Everything a Locust process needs to make requests (the sweep writes it to a file)."""

    model_config = ConfigDict(extra="forbid")

    target: str
    model: str
    api: Api = "completions"
    input_tokens: int = 256
    output_tokens: int = 128
    length_dist: str = "fixed"
    length_spread: float = 0.5
    prompts_file: str | None = None
    ignore_eos: bool = True
    include_usage: bool = True
    request_timeout_s: float = 120.0
    arrival: Literal["poisson", "constant"] = "poisson"
    max_in_flight: int = 20000
    seed: int | None = None
    # Exact lengths (loadgen.tokens): words that are one token each, and what the server adds.
    token_words: list[str] | None = None
    prompt_overhead: int = 0
    chat_overhead: int | None = None
    token_source: str | None = None  # "the server's /tokenize", "tokenizer FILE"; None: words
    # Every prompt starts with one of prefix_groups shared prefixes of prefix_tokens tokens.
    prefix_tokens: int = 0
    prefix_groups: int = 1
    # Conversations: each user holds sessions of this many turns through the chat API.
    turns: int = 1
    think_time_s: float = 0.0
    # Trace replay (open loop): the file, seconds per timestamp unit, tokens per hash id.
    trace_file: str | None = None
    trace_time_unit_s: float = 1.0
    trace_block_tokens: int = 512
    # Send each request in a trace of its own (a W3C traceparent header) for the engine's
    # spans to be joined with it (loadgen.otlp).
    trace_context: bool = False
    # Closed loop: each user's first request asks for a random share of its reply's tokens,
    # so that users started together do not send in waves (False: the old, phase-locked start).
    dephase: bool = True

    @property
    def shares_prefixes(self) -> bool:
        """Prompts that may begin alike: shared prefixes, conversations' history, a trace's
        hash ids, a file's prompts come round again. Uniform synthetic prompts do not, and
        their prefix-cache hit rate of 0% says nothing about the cache."""
        return bool(self.prefix_tokens or self.turns > 1 or self.trace_file or self.prompts_file)


class SweepConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    worker: WorkerConfig
    mode: Mode = "closed"
    adaptive: bool = True
    concurrency: list[int] | None = None
    rates: list[float] | None = None
    start_concurrency: int = 1
    max_concurrency: int = 1024
    start_rate: float = 1.0
    max_rate: float = 10000.0
    refine_steps: int = 2
    step_seconds: float = 30.0
    warmup_seconds: float = 10.0
    drain_timeout_s: float = 30.0
    sample_interval_s: float = 1.0
    vllm_metrics: str | None = None
    # The engine behind vllm_metrics (vllm, sglang, tgi, ...); None: found from the page.
    engine: str | None = None
    dcgm_exporter: str | None = None
    slos: dict[str, float] = Field(default_factory=dict)
    workers: int = 0
    external_workers: int = 0
    master_bind: str = "127.0.0.1"
    master_port: int | None = None
    error_threshold: float = 0.1
    max_lag_s: float = 0.1
    gain_threshold: float = 0.10
    littles_tolerance: float = 0.15
    stall_retries: int = 1  # measure a step again when the machine froze during it
    # Trace replay: one step per speed, each replaying the whole trace.
    speeds: list[float] | None = None
    # A step whose served mean prompt or completion length is off the requested by more.
    token_tolerance: float = 0.05
    dataset_prompts: int | None = None  # prompts a --dataset gave (a step past them cycles)
    # Where the sweep listens for the engine's trace spans (host:port; None: it does not),
    # and how long after a step it waits for them (an engine exports in batches).
    otlp_listen: str | None = None
    otlp_wait_s: float = 10.0
    # What one GPU costs an hour (--gpu-hour-price): each step's cost per million tokens.
    gpu_hour_price: float | None = None
    # The engine's caps as the user gave them (--max-num-seqs, --max-num-batched-tokens; a
    # tune's run: its launch's values): each step's diagnosis and what-if start from them.
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    # --target-rate: the boxes of this config that rate needs, with this share to spare.
    target_rate_rps: float | None = None
    capacity_margin: float = 0.2


class GpuActivity(BaseModel):
    util: float | None = None
    sm_active: float | None = None
    tensor_active: float | None = None
    dram_active: float | None = None
    gpus: int = 0


class StepResult(BaseModel):
    """One load level: the client's measurements and the monitor's window over the same hold."""

    schema_version: int = SCHEMA_VERSION
    index: int
    mode: Mode
    concurrency: int | None = None
    rate: float | None = None
    hold_start: float  # wall
    hold_end: float
    duration_s: float
    requests_completed: int
    requests_failed: int
    error_ratio: float
    errors_sample: list[str] = Field(default_factory=list)
    requests_per_s: float
    output_tokens_per_s: float
    # Relative standard error of output_tokens_per_s, from the spread of the rate over
    # equal parts of the hold: how far apart two steps must be to differ beyond noise.
    output_tokens_per_s_rse: float | None = None
    input_tokens_per_s: float | None = None
    ttft_p50_s: float | None = None
    ttft_p90_s: float | None = None
    ttft_p95_s: float | None = None
    ttft_p99_s: float | None = None
    # Share of those TTFTs timed by the kernel's receive stamp rather than the client's clock
    # (the client's clock adds its own lateness when one thread reads many streams).
    ttft_kernel_ratio: float | None = None
    itl_p50_s: float | None = None
    itl_p90_s: float | None = None
    itl_p95_s: float | None = None
    itl_p99_s: float | None = None
    tpot_p50_s: float | None = None
    tpot_p90_s: float | None = None
    tpot_p95_s: float | None = None
    tpot_p99_s: float | None = None
    e2e_p50_s: float | None = None
    e2e_p90_s: float | None = None
    e2e_p95_s: float | None = None
    e2e_p99_s: float | None = None
    e2e_mean_s: float | None = None
    # Little's law: three views of the number of requests in the system.
    client_in_flight_mean: float | None = None
    engine_in_flight_mean: float | None = None  # running + waiting at the engine
    littles_law_in_flight: float | None = None  # requests/s x mean e2e
    littles_law_deviation: float | None = None  # largest disagreement, share of the largest view
    littles_law_ok: bool | None = None
    # The client itself.
    client_cpu_ratio: float | None = None  # the busiest generator process, share of one core
    client_cpu_per_request_s: float | None = None
    client_limited: bool = False
    sched_lag_p50_s: float | None = None
    sched_lag_p99_s: float | None = None
    sched_lag_max_s: float | None = None
    # Open loop: latencies from when each request was due, not when it was sent, so a
    # late generator cannot hide the wait (no coordinated omission).
    ttft_sched_p50_s: float | None = None
    ttft_sched_p99_s: float | None = None
    e2e_sched_p50_s: float | None = None
    e2e_sched_p99_s: float | None = None
    late: bool = False
    speed: float | None = None  # trace replay: the speed this step replayed the trace at
    # What was asked for against what the server says it served (usage), mean per request.
    requested_prompt_tokens_mean: float | None = None
    served_prompt_tokens_mean: float | None = None
    requested_completion_tokens_mean: float | None = None
    served_completion_tokens_mean: float | None = None
    prompt_tokens_off: float | None = None  # served / requested - 1
    completion_tokens_off: float | None = None
    tokens_off: bool = False  # either is off by more than the tolerance (5%)
    # Conversations: TTFT p50 by turn index ("1", "2", ...) and requests per turn.
    ttft_p50_by_turn: dict[str, float] | None = None
    requests_by_turn: dict[str, int] | None = None
    dataset_cycled: bool = False  # the step sent more prompts than the dataset holds
    host_stalls: int = 0  # freezes of this machine during the hold (stall probe)
    host_stall_s: float = 0.0
    stalled: bool = False  # the machine froze long enough to void the step
    valid: bool = True
    invalid_reason: str | None = None
    # The monitor's window for the same interval.
    gpu: GpuActivity = Field(default_factory=GpuActivity)
    running_mean: float | None = None
    running_max: float | None = None
    waiting_mean: float | None = None
    waiting_max: float | None = None
    # The median reading: a queue that persists, unlike the mean, which one reading of a
    # cohort of streams being re-admitted together can lift past the queueing threshold.
    waiting_p50: float | None = None
    waiting_growth: float | None = None  # last minus first waiting reading in the hold
    kv_cache_usage_mean: float | None = None
    preemptions_per_s: float | None = None
    engine_generation_tokens_per_s: float | None = None
    prefix_cache_hit_rate: float | None = None  # the engine's, over the hold
    verdict: str | None = None
    verdict_confidence: float | None = None
    verdict_summary: str | None = None
    verdicts: list[dict] = Field(default_factory=list)
    # The monitor's estimate, from this step's window, of how much more load fits
    # (factor, limit, concurrency_at_limit, rate_at_limit_rps, limits, assumes).
    headroom: dict | None = None
    # The monitor's what-if from this step's window (engines[].whatif of a snapshot): the
    # change to the leading limit's knob and what it is predicted to buy.
    whatif: list[dict] | None = None
    # TTFT split: queue_s, prefill_s, engine_other_s (engine means) and outside_s, the
    # client's TTFT p50 beyond the engine's (network, gateway, a late client).
    ttft_parts: dict | None = None
    # Energy over the hold (monitor.diagnosis.energy): the GPUs' mean power from their energy counters
    # ("counter"), or their power readings where a GPU has none ("power"), against the
    # tokens and requests the client received; None without a GPU reading (a dash).
    gpu_power_watts: float | None = None
    gpu_energy_joules: float | None = None
    energy_source: str | None = None
    energy_per_token_joules: float | None = None
    energy_per_request_joules: float | None = None
    tokens_per_joule: float | None = None
    # At the sweep's --gpu-hour-price: the GPUs' hours over the hold per million tokens.
    cost_per_million_tokens: float | None = None


class HeadroomCheck(BaseModel):
    """The first step's estimate of the saturation point against the one the sweep measured."""

    step_index: int
    estimated_concurrency: float | None = None
    estimated_rate_rps: float | None = None
    limit: str | None = None
    measured_concurrency: float | None = None
    # The offered rate at saturation (--rates), or the request rate it reached (closed loop).
    measured_rate_rps: float | None = None
    # estimated over measured, in the sweep's own mode (concurrency, or rate for --rates).
    ratio: float | None = None

    def in_mode(self, closed: bool) -> tuple[float | None, float | None]:
        """(estimated, measured) load in the sweep's own terms: streams, or req/s."""
        if closed:
            return self.estimated_concurrency, self.measured_concurrency
        return self.estimated_rate_rps, self.measured_rate_rps


class Saturation(BaseModel):
    reached: bool
    concurrency: int | None = None
    rate: float | None = None
    output_tokens_per_s: float | None = None
    requests_per_s: float | None = None
    cause: str | None = None
    inferred_cap: int | None = None
    step_index: int | None = None
    reason: str
    # Set when the limit lies between the saturation step and this (lower) one: the step
    # already queues but still did much more than the one below, or the fitted knee lies
    # below the step nearest it. An adaptive sweep bisects there.
    refine_from_step_index: int | None = None
    # The closed-loop fit X(n) = n / (a + b n) to the measured steps, where it decided the
    # knee: the concurrency at which a doubling gains under the threshold.
    fitted_knee: float | None = None
    # The saturation step's energy (GPU joules per output token) and, with a GPU-hour price,
    # what a million output tokens cost there.
    energy_per_token_joules: float | None = None
    cost_per_million_tokens: float | None = None


class Goodput(BaseModel):
    slos: dict[str, float]
    met: bool
    concurrency: int | None = None
    rate: float | None = None
    output_tokens_per_s: float | None = None
    requests_per_s: float | None = None
    step_index: int | None = None
    reason: str = ""


class Capacity(BaseModel):
    """The boxes of the swept config a target rate needs (loadgen.capacity)."""

    target_rps: float
    goodput_rps_per_box: float | None = None  # requests/s of the best step meeting the SLOs
    margin: float  # the share held past the target: boxes = ceil(target / goodput x (1 + m))
    boxes: int | None = None
    basis: str
    step_index: int | None = None


class EnvironmentInfo(BaseModel):
    headroom_version: str
    python: str
    platform: str
    hostname: str
    cpu_count: int
    locust_version: str | None = None
    argv: list[str] = Field(default_factory=list)
    started: float
    ended: float | None = None


class Before(BaseModel):
    """The engine as the sweep found it, before sending anything: other traffic's load."""

    running_mean: float | None = None
    waiting_mean: float | None = None
    waiting_p50: float | None = None
    seq_cap: float | None = None  # the sequence cap the engine reports, where it does
    verdict: str | None = None
    # Requests already waited for room (waiting through at least half the readings), or ran
    # at the engine's sequence cap: every step's requests queue behind them.
    saturated: bool = False
    summary: str = ""

    @property
    def at_cap(self) -> bool:
        """Running at the sequence cap the engine reports: the next request waits for a slot."""
        return self.seq_cap is not None and (self.running_mean or 0.0) >= self.seq_cap - 0.5

    @property
    def cause(self) -> str | None:
        """Why the next request waits: at the sequence cap that is the cap, whatever the engine
        was doing with what it ran (the memory-bound demo box, 256 of 256, read memory-bound
        before a sweep and seq-cap at every step of it)."""
        caps = ("seq-cap", "kv-cap", "token-cap")
        return "seq-cap" if self.at_cap and self.verdict not in caps else self.verdict


class SweepResult(BaseModel):
    schema_version: int = SCHEMA_VERSION
    config: SweepConfig
    environment: EnvironmentInfo
    steps: list[StepResult]
    saturation: Saturation
    goodput: Goodput | None = None
    # "complete", "saturated-by-errors", "saturated-before" (other traffic already saturated
    # the box and a step finished no request behind it), "interrupted", "error: ..."
    stopped: str
    notes: list[str] = Field(default_factory=list)
    headroom_check: HeadroomCheck | None = None
    before: Before | None = None
    capacity: Capacity | None = None
