"""Continuous batching over discrete steps, as vLLM's v1 scheduler does it.

Pure: no clock, no threads. ``schedule()`` plans one step (which sequences, how
many tokens each, what it costs on the GPU and the host); ``commit()`` applies it
at the times the caller says the step started and ended. The virtual-clock
``Simulator`` and the real-time engine thread drive the same two calls.

Scheduling, each step, within ``max_num_batched_tokens``:
- running sequences first, in admission order: a decoding one needs 1 token, a
  prefilling one the rest of its prompt (chunked when the budget is short);
- a sequence whose new tokens need KV blocks that are not free preempts the
  latest-admitted running sequence (recompute: its blocks are freed and it
  goes back to the front of the queue to prefill prompt + output again);
- then, if nothing was preempted, waiting requests join while fewer than
  ``max_num_seqs`` run and their first chunk's blocks are free.

Prefix caching, simply: a request names its prompt's full blocks by chained hashes;
on admission its leading blocks that an earlier prompt computed count as computed
(no prefill work for them), and a prompt's blocks are remembered once its prefill ends.
The cache remembers at most ``num_blocks`` blocks, least recently used first out; it
does not model the memory those blocks share (each request still holds its own).
"""

from __future__ import annotations

import itertools
import random
from bisect import bisect_left
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from simulator.config import EngineConfig
from simulator.hardware import GpuCost, StepWork, gpu_cost, step_work
from simulator.stats import Stats

# sink(new_tokens, finish_reason or None): called with each step's output of a request.
Sink = Callable[[int, "str | None"], None]

_ids = itertools.count(1)


@dataclass(slots=True, eq=False)
class Request:
    prompt_tokens: int
    max_tokens: int
    arrival: float
    ignore_eos: bool = True
    sink: Sink | None = None
    on_finish: Callable[[Request, float], None] | None = None
    rid: int = field(default_factory=lambda: next(_ids))
    # The output index at which the model emits end-of-sequence (None: never).
    eos_at: int | None = None
    # Chained hashes of the prompt's full blocks, for the prefix cache (empty: never hits).
    block_hashes: tuple[int, ...] = ()
    # State.
    num_computed: int = 0  # tokens whose KV is in the cache
    output: int = 0  # tokens generated
    blocks: int = 0
    first_scheduled: float | None = None
    first_token: float | None = None
    last_token: float | None = None
    preemptions: int = 0
    finish_reason: str | None = None
    finished_at: float | None = None

    @property
    def needed(self) -> int:
        """Tokens to compute before the next token can be sampled."""
        return self.prompt_tokens + self.output - self.num_computed


@dataclass(frozen=True, slots=True)
class Step:
    scheduled: tuple[tuple[Request, int], ...]
    work: StepWork
    gpu: GpuCost
    host_cpu_s: float  # scheduling, sampling, detokenising, streaming, input prep
    thread_cpu_s: float  # all the engine thread burns: host work plus launches
    duration_s: float
    gpu_offset_s: float  # when the GPU phase starts within the step
    preempted: int
    prefill_tokens: int

    @property
    def tokens(self) -> int:
        return self.work.tokens


class Emission(NamedTuple):
    """One request's share of a step's output. A tuple: one is made per token, millions in a
    virtual-clock test, where a frozen dataclass cost three times as much to build."""

    request: Request
    new_tokens: int
    finish_reason: str | None


class EngineCore:
    def __init__(self, cfg: EngineConfig, stats: Stats | None = None) -> None:
        self.cfg = cfg
        self.gpu = cfg.gpu_spec
        self.model = cfg.model_spec
        self.kernels = cfg.kernel_model
        self.num_blocks = cfg.total_blocks
        self.free_blocks = self.num_blocks
        self.stats = stats if stats is not None else Stats()
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self._rng = random.Random(cfg.seed)
        self.prefix_cache: OrderedDict[int, None] = OrderedDict()

    # -- state -------------------------------------------------------------------

    @property
    def kv_usage(self) -> float:
        return 1.0 - self.free_blocks / self.num_blocks

    @property
    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    def add(self, req: Request) -> None:
        if req.eos_at is None and not req.ignore_eos and self.cfg.eos_probability > 0:
            # Geometric draw: the first token at which a per-token EOS chance fires.
            p, k = self.cfg.eos_probability, 1
            while k < req.max_tokens and self._rng.random() >= p:
                k += 1
            req.eos_at = k if k < req.max_tokens else None
        self.waiting.append(req)

    def abort(self, req: Request, now: float) -> None:
        """Drop a request (its client went away); it counts as finished with reason abort."""
        if req.finish_reason is not None:
            return
        if req in self.running:
            self.running.remove(req)
        elif req in self.waiting:
            self.waiting.remove(req)
        self._finish(req, "abort", now)

    # -- planning ----------------------------------------------------------------

    def _cached_tokens(self, req: Request) -> int:
        """Leading prompt tokens already in the prefix cache (the last token is always computed)."""
        if not self.cfg.prefix_caching or req.num_computed:
            return 0
        usable = (req.prompt_tokens - 1) // self.cfg.block_size
        n = 0
        for h in req.block_hashes[:usable]:
            if h not in self.prefix_cache:
                break
            n += 1
        return n * self.cfg.block_size

    def _remember(self, req: Request) -> None:
        cache = self.prefix_cache
        for h in req.block_hashes:
            cache[h] = None
            cache.move_to_end(h)
        while len(cache) > self.num_blocks:
            cache.popitem(last=False)

    def _blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.cfg.block_size)

    def _preempt(self, victim: Request) -> None:
        self.free_blocks += victim.blocks
        victim.blocks = 0
        victim.num_computed = 0
        victim.preemptions += 1
        self.stats.preemptions += 1
        self.waiting.appendleft(victim)

    def schedule(self) -> Step | None:
        """Plan one step; None when there is nothing to run."""
        running = self.running
        if not running and not self.waiting:
            return None
        cfg = self.cfg
        bs = cfg.block_size
        budget = cfg.max_num_batched_tokens
        scheduled: list[tuple[Request, int]] = []
        preempted = 0
        i = 0
        # The hot loop of every virtual-clock test: Request.needed and _blocks_for inlined.
        while i < len(running) and budget > 0:
            req = running[i]
            n = req.prompt_tokens + req.output - req.num_computed
            if n > budget:
                n = budget
            need = -(-(req.num_computed + n) // bs) - req.blocks
            self_preempted = False
            while need > self.free_blocks:
                victim = running.pop()
                self._preempt(victim)
                preempted += 1
                if victim is req:
                    self_preempted = True
                    break
            if self_preempted:
                break
            self.free_blocks -= need
            req.blocks += need
            scheduled.append((req, n))
            budget -= n
            i += 1
        if not preempted:
            while self.waiting and len(self.running) < cfg.max_num_seqs and budget > 0:
                req = self.waiting[0]
                cached = self._cached_tokens(req)
                n = min(req.needed - cached, budget)
                if not cfg.chunked_prefill and n < req.needed - cached:
                    break
                need = self._blocks_for(req.num_computed + cached + n)
                if need > self.free_blocks:
                    break  # waits for KV capacity
                self.waiting.popleft()
                if cfg.prefix_caching and req.num_computed == 0:
                    self.stats.prefix_cache_queries += req.prompt_tokens
                    self.stats.prefix_cache_hits += cached
                    for h in req.block_hashes[: cached // cfg.block_size]:
                        self.prefix_cache.move_to_end(h)
                req.num_computed += cached
                self.free_blocks -= need
                req.blocks = need
                self.running.append(req)
                scheduled.append((req, n))
                budget -= n
        if not scheduled:
            # Everything is waiting and nothing fits (cannot happen once one request
            # fits the cache, which validate() guarantees); avoid a busy spin.
            return None
        return self._cost(tuple(scheduled), preempted)

    def _cost(self, scheduled: tuple[tuple[Request, int], ...], preempted: int) -> Step:
        cfg = self.cfg
        work = step_work(
            self.model,
            [(n, req.num_computed) for req, n in scheduled],
            cfg.tensor_parallel_size,
        )
        gpu = gpu_cost(self.gpu, work, self.kernels)
        host = (
            cfg.cpu_step_s + cfg.cpu_per_seq_s * len(scheduled) + cfg.cpu_per_token_s * work.tokens
        )
        thread = host + gpu.launch_cpu_s
        if cfg.overlap:
            # The host prepares the next step while the GPU runs this one: the loop
            # turns at the pace of the slower of the two.
            duration, offset = max(thread, gpu.phase_s), 0.0
        else:
            duration, offset = host + gpu.phase_s, host
        prefill = sum(
            n
            for req, n in scheduled
            if req.prompt_tokens + req.output - req.num_computed > 1 or req.output == 0
        )
        return Step(scheduled, work, gpu, host, thread, duration, offset, preempted, prefill)

    # -- applying ----------------------------------------------------------------

    def commit(self, step: Step, t_start: float, t_end: float) -> list[Emission]:
        """Apply a planned step that ran from t_start to t_end; return what each request got."""
        st = self.stats
        st.steps += 1
        st.flops += step.work.flops
        st.read_bytes += step.work.read_bytes
        st.write_bytes += step.work.write_bytes
        st.observe("iteration_tokens_total", step.tokens)
        # The inter-token latency is observed once a token (millions in a virtual-clock test):
        # kept in locals for the step and written back at its end, in the same order of
        # additions as Hist.observe. A decoding request's last token came at the previous
        # step's end, so one bucket lookup serves most of the step's tokens.
        itl = st.hist["inter_token_latency_seconds"]
        itl_counts, itl_bounds = itl.counts, itl.bounds
        itl_sum, itl_n, generated = itl.sum, 0, 0
        last_v, last_i = -1.0, 0
        out: list[Emission] = []
        for req, n in step.scheduled:
            if req.finish_reason is not None:  # aborted while the step ran
                continue
            if req.first_scheduled is None:
                # A request that arrived while the loop was between steps joins at once.
                req.first_scheduled = max(t_start, req.arrival)
                st.observe("request_queue_time_seconds", req.first_scheduled - req.arrival)
            req.num_computed += n
            if req.prompt_tokens + req.output - req.num_computed > 0:
                continue  # a prefill chunk that does not finish the prompt
            req.output += 1
            generated += 1
            if req.first_token is None:
                req.first_token = t_end
                st.prompt_tokens += req.prompt_tokens
                if self.cfg.prefix_caching and req.block_hashes:
                    self._remember(req)
                st.observe("time_to_first_token_seconds", t_end - req.arrival)
            else:
                v = t_end - req.last_token
                if v != last_v:
                    last_v, last_i = v, bisect_left(itl_bounds, v)
                itl_counts[last_i] += 1
                itl_sum += v
                itl_n += 1
            req.last_token = t_end
            reason = None
            if req.eos_at is not None and req.output >= req.eos_at:
                reason = "stop"
            elif req.output >= req.max_tokens:
                reason = "length"
            if reason is not None:
                self.running.remove(req)
                self._finish(req, reason, t_end)
            out.append(Emission(req, 1, reason))
        itl.sum, itl.count = itl_sum, itl.count + itl_n
        st.generation_tokens += generated
        return out

    def _finish(self, req: Request, reason: str, now: float) -> None:
        self.free_blocks += req.blocks
        req.blocks = 0
        req.finish_reason = reason
        req.finished_at = now
        st = self.stats
        st.success[reason] += 1
        st.observe("e2e_request_latency_seconds", now - req.arrival)
        st.observe("request_prompt_tokens", req.prompt_tokens)
        st.observe("request_generation_tokens", req.output)
        st.observe("request_max_num_generation_tokens", req.max_tokens)
        st.observe("request_params_max_tokens", req.max_tokens)
        st.observe("request_params_n", 1)
        st.observe("request_num_preemptions", req.preemptions)
        if req.first_scheduled is not None:
            st.observe("request_inference_time_seconds", now - req.first_scheduled)
        if req.first_token is not None and req.first_scheduled is not None:
            st.observe("request_prefill_time_seconds", req.first_token - req.first_scheduled)
            st.observe("request_decode_time_seconds", now - req.first_token)
            st.observe("request_prefill_kv_computed_tokens", req.prompt_tokens)
            if req.output > 1:
                st.observe(
                    "request_time_per_output_token_seconds",
                    (now - req.first_token) / (req.output - 1),
                )
        if req.on_finish is not None:
            req.on_finish(req, now)
