"""The sweep controller: steps of load, the monitor's window for each, analysis at the end.

It runs in the `headroom sweep` process (plain threads, no gevent), holds a
monitor over the engine's metrics, and drives a separate Locust process (see
``loadgen.driver``). Each step is appended to ``steps.jsonl`` the moment it is
measured, so an interrupt or a crash loses nothing and ``--resume`` continues.
"""

from __future__ import annotations

import math
import os
import platform
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loadgen import analysis
from loadgen.capacity import saturation_energy, sweep_capacity
from loadgen.driver import LocustDriver, records_between
from loadgen.engine_view import EngineView, engine_view
from loadgen.otlp import PROTOCOL_HINT, TraceReceiver, median_request_parts
from loadgen.outputs import jsonl, warm_up, write_all
from loadgen.plan import AdaptivePlan, FixedPlan
from loadgen.progress import Progress
from loadgen.records import RequestRecord
from loadgen.schema import (
    Before,
    EnvironmentInfo,
    GpuActivity,
    Saturation,
    StepResult,
    SweepConfig,
    SweepResult,
)
from loadgen.stall import StallProbe
from loadgen.stats import client_cpu, client_stats, rate_rse
from loadgen.trace import TraceEntry, load_trace, mean_rate, span_s
from monitor.core.errors import EndpointError, HeadroomError
from monitor.diagnosis import Caps, Diagnoser
from monitor.diagnosis.energy import Energy
from monitor.read.sampler import Sampler
from monitor.watch.pipeline import Monitor
from monitor.window.full import compute_window
from monitor.window.stats import WindowStats

CLIENT_CPU_SATURATED = 0.9


def _stall_budget(hold_s: float) -> float:
    """Seconds of machine freeze a hold can take before its numbers describe the freeze."""
    return max(1.0, 0.1 * hold_s)


CLIENT_SHORTFALL = 0.1


def _off(served: float | None, requested: float | None) -> float | None:
    """served / requested - 1: how far the server's count is from what was asked."""
    if served is None or not requested:
        return None
    return served / requested - 1


def _r(v: float | None, nd: int = 6) -> float | None:
    return None if v is None else round(float(v), nd)


def environment_info(argv: list[str]) -> EnvironmentInfo:
    try:
        from importlib.metadata import version

        hv = version("headroom")
        lv: str | None = version("locust")
    except Exception:
        hv, lv = "unknown", None
    return EnvironmentInfo(
        headroom_version=hv,
        python=sys.version.split()[0],
        platform=platform.platform(),
        hostname=socket.gethostname(),
        cpu_count=os.cpu_count() or 0,
        locust_version=lv,
        argv=argv,
        started=time.time(),
    )


def build_sampler(cfg: SweepConfig, nvml: bool = False) -> tuple[Sampler, list[str]]:
    from monitor.sources.build import build_sources

    urls = [cfg.vllm_metrics] if cfg.vllm_metrics else []
    # No GPU source asked for: a dcgm-exporter page beside the engine is read where there is
    # one (`headroom sim` serves its simulated GPU at /gpu/metrics).
    sources, notes = build_sources(
        vllm_urls=urls, dcgm_exporter_url=cfg.dcgm_exporter, nvml=nvml, engine=cfg.engine,
        find_gpu_page=not nvml,
    )  # fmt: skip
    return Sampler(sources, interval=cfg.sample_interval_s), list(notes)


class Sweep:
    def __init__(
        self,
        config: SweepConfig,
        out_dir: Path,
        sampler: Sampler | None = None,
        progress: Progress | None = None,
        resume: bool = False,
        argv: list[str] | None = None,
        notes: list[str] | None = None,
        python: str = sys.executable,
    ) -> None:
        self.cfg = config
        self.out = out_dir
        self.sampler = sampler
        self.progress = progress or Progress(quiet=True)
        self.progress.prefixes = config.worker.shares_prefixes
        self.resume = resume
        self.argv = argv or []
        self.notes = list(notes or [])
        self.python = python
        self.steps: list[StepResult] = []
        self.driver: LocustDriver | None = None
        self.on_step: Callable[[StepResult], None] | None = None
        # Gaps under 0.1 s are scheduling jitter on a busy host, not freezes.
        self.probe = StallProbe(threshold_s=0.1)
        # The engine's caps as the user gave them: the live view and each step's diagnosis
        # (its verdict, headroom figure and what-if) start from them.
        self.caps = Caps(
            max_num_seqs=config.max_num_seqs, max_num_batched_tokens=config.max_num_batched_tokens
        )
        # The live view for the progress line; each step's verdict comes from its own window.
        self.monitor = (
            Monitor(
                sampler,
                window_s=max(2.0, config.step_seconds / 2),
                diagnoser=Diagnoser(caps=self.caps),
            )
            if sampler
            else None
        )
        w = config.worker
        self.trace: list[TraceEntry] = (
            load_trace(w.trace_file, w.trace_time_unit_s) if w.trace_file else []
        )
        self._cycled_said = False
        self._warmup_said = False
        self._speed_of = {mean_rate(self.trace) * x: x for x in (config.speeds or [1.0])}
        self.traces: TraceReceiver | None = None
        self._spans_said = False
        self.before: Before | None = None

    # -- plan --------------------------------------------------------------------------------
    def _plan(self) -> FixedPlan | AdaptivePlan:
        c = self.cfg
        if self.trace:
            # Steps are known by their load, the trace's mean rate at each speed.
            return FixedPlan(list(self._speed_of))
        if c.mode == "closed":
            if not c.adaptive and c.concurrency:
                return FixedPlan(c.concurrency)
            return AdaptivePlan(c.start_concurrency, c.max_concurrency, c.refine_steps, True,
                                c.gain_threshold, c.error_threshold)  # fmt: skip
        if not c.adaptive and c.rates:
            return FixedPlan(c.rates)
        return AdaptivePlan(c.start_rate, c.max_rate, c.refine_steps, False,
                            c.gain_threshold, c.error_threshold)  # fmt: skip

    # -- one step ----------------------------------------------------------------------------
    def _wait(self, until: float, index: int, conc: int | None, rate: float | None, phase: str,
              total: float) -> None:  # fmt: skip
        d = self.driver
        assert d is not None
        begin = until - total
        while True:
            now = time.monotonic()
            if now >= until:
                return
            d.poll()
            if not d.alive():
                raise HeadroomError(f"the load generator exited: {d.failure_hint()}")
            self.progress.phase(index, conc, rate, phase, now - begin, total, d.in_flight(),
                                len(d.records), self._live_verdict())  # fmt: skip
            time.sleep(min(0.1, max(0.0, until - now)))

    def _live_verdict(self) -> str | None:
        diagnosis = self.monitor.diagnosis() if self.monitor is not None else None
        top = diagnosis.top if diagnosis is not None else None
        return None if top is None else top.cause

    def _window(self, start_m: float, end_m: float) -> WindowStats | None:
        if self.sampler is None:
            return None
        # The tick after the hold's end carries the readings for its last interval.
        deadline = time.monotonic() + 2 * self.cfg.sample_interval_s + 2.0
        while time.monotonic() < deadline:
            latest = self.sampler.latest()
            if latest is not None and latest.t >= end_m:
                break
            time.sleep(0.05)
        snaps = self.sampler.snapshots()
        after = [s.t for s in snaps if s.t >= end_m]
        end = min(after) if after else end_m
        # Only ticks inside the hold: Sampler.window would add one from before it as
        # a counter baseline, and its gauges (running, waiting) belong to the last step.
        return compute_window(snaps, start_m, end)

    def run_step(
        self, index: int, conc: int | None, rate: float | None, speed: float | None = None
    ) -> StepResult:
        d = self.driver
        assert d is not None
        c = self.cfg
        d.send_step(index, conc, rate, speed)
        # A trace replay has no steady state to warm up to: its window is the whole replay.
        warmup = 0.0 if speed else c.warmup_seconds
        # A replay's hold lasts its schedule and a little more, for the worker to begin it.
        hold = span_s(self.trace) / speed + 0.5 if speed else c.step_seconds
        applied = time.monotonic() + 30.0
        while time.monotonic() < applied:
            d.poll()
            if d.step_seen(index) and (conc is None or d.users() >= conc):
                break
            if not d.alive():
                raise HeadroomError(f"the load generator exited: {d.failure_hint()}")
            time.sleep(0.05)
        t = time.monotonic()
        self._wait(t + warmup, index, conc, rate, "warm-up", warmup)
        start_m, start_w = time.monotonic(), time.time()
        if speed:
            # The replay began when the worker took the step, a status line before we knew.
            began = d.step_started(index)
            if began is not None and began < start_w:
                start_m, start_w = start_m - (start_w - began), began
        self._wait(start_m + hold, index, conc, rate, "hold", hold)
        end_m, end_w = time.monotonic(), time.time()
        # Keep the load on until every request begun in the hold has finished and
        # been reported, so tokens delivered inside the hold are all counted.
        drain = time.monotonic() + c.drain_timeout_s
        while time.monotonic() < drain:
            d.poll()
            seen, oldest = d.status_time(), d.oldest_in_flight()
            if speed:
                # A replay ends when its last request has: none may be left in flight.
                if seen is not None and seen >= end_w and d.in_flight() == 0:
                    break
            elif seen is not None and seen >= end_w and (oldest is None or oldest >= end_w):
                break
            time.sleep(0.05)
        if speed:
            # Every request of the replay counts, the last ones finishing after its schedule.
            end_m, end_w = time.monotonic(), time.time()
        window = self._window(start_m, end_m)
        step = self._measure(index, conc, rate, start_w, end_w, window)
        step = step.model_copy(update=self._traffic_figures(index, speed))
        self._warmup_check(step, warmup)
        n, lost = self.probe.stalls(start_m, end_m)
        if n:
            update: dict = {"host_stalls": n, "host_stall_s": round(lost, 3)}
            if lost > _stall_budget(c.step_seconds):
                why = f"this machine froze {lost:.1f} s during the hold"
                update["valid"] = False
                update["stalled"] = True
                # A hold the machine froze through is why nothing came back, if nothing did.
                earlier = None if analysis.measured_nothing(step) else step.invalid_reason
                update["invalid_reason"] = "; ".join(x for x in (earlier, why) if x)
            step = step.model_copy(update=update)
        return step

    def _warmup_check(self, step: StepResult, warmup: float) -> None:
        """Say once when a closed-loop step's warm-up was shorter than its median request.

        A step's users start together and each first request asks for a random share of its
        reply (worker_locust._dephased), so that their requests spread out; until those first
        requests end, the load is still settling. They are in flight, so the hold
        keeps its concurrency, but part of it measured the start.
        """
        e2e = step.e2e_p50_s
        if self._warmup_said or step.concurrency is None or e2e is None or e2e <= warmup:
            return
        self._warmup_said = True
        spread = "(first requests shortened to spread them out) " if self.cfg.worker.dephase else ""
        # Twice the median: the first requests of a step queue behind each other.
        msg = (
            f"note: step {step.index}'s requests took {e2e:.1f} s (median), longer than its "
            f"{warmup:g} s warm-up: the users' start {spread}ran into the hold; "
            f"--warmup-seconds {math.ceil(2 * e2e):g} would cover it"
        )
        self.progress.message(msg)
        self.notes.append(msg)

    def _traffic_figures(self, index: int, speed: float | None) -> dict:
        """What the step's traffic was, beside what it measured: speed, dataset cycling."""
        c = self.cfg
        out: dict = {"speed": speed}
        d = self.driver
        n = c.dataset_prompts
        if n and d is not None:
            # Prompts every step so far has sent: past the file's size, it was cycled.
            sent = sum(1 for r in d.records if r.step <= index)
            if sent > n:
                out["dataset_cycled"] = True
                if not self._cycled_said:
                    self._cycled_said = True
                    self.progress.message(
                        f"note: step {index} had sent {sent} requests from a dataset of {n} "
                        "prompts: cycling through them again"
                    )
        return out

    def _measure(self, index: int, conc: int | None, rate: float | None, start: float,
                 end: float, window: WindowStats | None) -> StepResult:  # fmt: skip
        d = self.driver
        assert d is not None
        c = self.cfg
        records = records_between(d.records, start, end)
        if self.trace:
            # A replay is its own requests: a step before it may leave a backlog still
            # finishing (an overloaded server, a step measured again after a freeze).
            records = [r for r in records if r.step == index]
        cs = client_stats(records, start, end)
        median_request = self._median_request(index, records, start, end)
        cpu = client_cpu(d.statuses, start, end)
        ev = engine_view(window, self.caps) if window is not None else None
        dev, ok = analysis.littles_law(
            cs.in_flight_mean,
            ev.in_flight if ev is not None else None,
            cs.littles_law_in_flight,
            c.littles_tolerance,
            ev.readings if ev is not None else None,
        )
        if self.trace:
            # A replay has no steady state (bursts, a ramp down at its end): the three views
            # need not agree, and a mismatch would only be noise.
            dev, ok = None, None
        reasons = []
        if cpu.busiest_ratio is not None and cpu.busiest_ratio >= CLIENT_CPU_SATURATED:
            reasons.append(f"a generator process used {100 * cpu.busiest_ratio:.0f}% of a core")
        if (
            conc is not None
            # Users thinking between turns hold no request: in flight is below the sessions.
            and not (c.worker.turns > 1 and c.worker.think_time_s > 0)
            and cs.in_flight_mean < conc * (1 - CLIENT_SHORTFALL)
            and cs.error_ratio < 0.5
        ):
            reasons.append(f"it held {cs.in_flight_mean:.1f} of {conc} requests in flight")
        if self.trace:
            if cs.requests_started < len(self.trace) * (1 - CLIENT_SHORTFALL):
                reasons.append(f"it started {cs.requests_started} of the trace's {len(self.trace)}")
        elif rate is not None and cs.requests_started < rate * cs.duration_s * (
            1 - CLIENT_SHORTFALL
        ):
            reasons.append(
                f"it started {cs.requests_started / cs.duration_s:.2f} of {rate:g} req/s"
            )
        if ev is not None and ev.verdict == "client-limited" and not reasons:
            reasons.append(ev.verdict_summary or "the diagnosis says client-limited")
        late = (
            rate is not None and cs.sched_lag_p99_s is not None and cs.sched_lag_p99_s > c.max_lag_s
        )
        invalid = []
        if late:
            invalid.append(
                f"generator late: p99 start lag {cs.sched_lag_p99_s:.3f} s > {c.max_lag_s} s"
            )
        if reasons:
            invalid.append("client-limited: " + "; ".join(reasons))
        if cs.requests_completed == 0 and cs.requests_failed == 0 and cs.output_tokens_per_s == 0:
            invalid.append(
                f"nothing came back in the hold ({cs.in_flight_mean:.0f} in flight, no request "
                "finished, no token arrived): "
                + (
                    "they waited behind other requests at the engine"
                    if ev is not None and (ev.waiting_p50 or 0.0) >= analysis.QUEUE_MIN
                    else f"hold longer than a first token takes (--step-seconds, now {c.step_seconds:g})"
                )
            )
        started = cs.requests_started
        e = ev or EngineView(gpu=GpuActivity())
        p_off = _off(cs.served_prompt_mean, cs.requested_prompt_mean)
        c_off = _off(cs.served_completion_mean, cs.requested_completion_mean)
        tokens_off = any(x is not None and abs(x) > c.token_tolerance for x in (p_off, c_off))
        return StepResult(
            index=index,
            mode=c.mode,
            concurrency=conc,
            rate=rate,
            hold_start=round(start, 6),
            hold_end=round(end, 6),
            duration_s=round(cs.duration_s, 4),
            requests_completed=cs.requests_completed,
            requests_failed=cs.requests_failed,
            error_ratio=round(cs.error_ratio, 5),
            errors_sample=list(cs.errors_sample),
            requests_per_s=round(cs.requests_per_s, 5),
            output_tokens_per_s=round(cs.output_tokens_per_s, 4),
            output_tokens_per_s_rse=_r(rate_rse(records, start, end), 4),
            input_tokens_per_s=_r(cs.input_tokens_per_s, 4),
            **{
                f"{m}_{p}_s": _r(getattr(cs, m)[p])
                for m in ("ttft", "itl", "tpot", "e2e")
                for p in ("p50", "p90", "p95", "p99")
            },  # fmt: skip
            e2e_mean_s=_r(cs.e2e_mean_s),
            ttft_kernel_ratio=_r(cs.ttft_kernel_ratio, 4),
            client_in_flight_mean=_r(cs.in_flight_mean, 4),
            engine_in_flight_mean=_r(e.in_flight, 4),
            littles_law_in_flight=_r(cs.littles_law_in_flight, 4),
            littles_law_deviation=_r(dev, 4),
            littles_law_ok=ok,
            client_cpu_ratio=_r(cpu.busiest_ratio, 4),
            client_cpu_per_request_s=_r(cpu.total_cpu_s / started, 6)
            if cpu.total_cpu_s and started
            else None,
            client_limited=bool(reasons),
            sched_lag_p50_s=_r(cs.sched_lag_p50_s),
            sched_lag_p99_s=_r(cs.sched_lag_p99_s),
            sched_lag_max_s=_r(cs.sched_lag_max_s),
            **{
                f"{m}_sched_{p}_s": _r(d_[p]) if d_ is not None else None
                for m, d_ in (("ttft", cs.ttft_sched), ("e2e", cs.e2e_sched))
                for p in ("p50", "p99")
            },  # fmt: skip
            late=late,
            requested_prompt_tokens_mean=_r(cs.requested_prompt_mean, 2),
            served_prompt_tokens_mean=_r(cs.served_prompt_mean, 2),
            requested_completion_tokens_mean=_r(cs.requested_completion_mean, 2),
            served_completion_tokens_mean=_r(cs.served_completion_mean, 2),
            prompt_tokens_off=_r(p_off, 4),
            completion_tokens_off=_r(c_off, 4),
            tokens_off=tokens_off,
            ttft_p50_by_turn=None
            if cs.ttft_p50_by_turn is None
            else {k: round(v, 6) for k, v in cs.ttft_p50_by_turn.items()},
            requests_by_turn=cs.requests_by_turn,
            prefix_cache_hit_rate=_r(e.prefix_cache_hit_rate, 4),
            valid=not invalid,
            invalid_reason="; ".join(invalid) or None,
            gpu=e.gpu,
            running_mean=_r(e.running_mean, 3),
            running_max=_r(e.running_max, 3),
            waiting_mean=_r(e.waiting_mean, 3),
            waiting_max=_r(e.waiting_max, 3),
            waiting_p50=_r(e.waiting_p50, 3),
            waiting_growth=_r(e.waiting_growth, 3),
            kv_cache_usage_mean=_r(e.kv_cache_usage_mean, 4),
            preemptions_per_s=_r(e.preemptions_per_s, 4),
            engine_generation_tokens_per_s=_r(e.generation_tokens_per_s, 3),
            verdict=e.verdict,
            verdict_confidence=e.verdict_confidence,
            verdict_summary=e.verdict_summary,
            verdicts=e.verdicts,
            headroom=e.headroom,
            whatif=e.whatif,
            **step_energy(e.energy, cs.output_tokens_per_s, cs.requests_per_s, c.gpu_hour_price),
            ttft_parts=_with_median_request(
                _with_outside(
                    e.ttft_parts, cs.ttft_mean_s, cs.ttft["p50"], client_late=bool(reasons)
                ),
                median_request,
            ),
        )

    def _median_request(
        self, index: int, records: list[RequestRecord], start: float, end: float
    ) -> dict | None:
        """The TTFT parts of the step's median request, from the engine's spans of them."""
        rx = self.traces
        if rx is None:
            return None
        # The requests the step's TTFT percentiles are of: those that ended in the hold.
        ok = [
            r
            for r in records
            if r.ok and r.ttft is not None and r.trace_id and start <= (r.end or 0.0) <= end
        ]
        if not ok:
            return None
        # Once the engine has been found sending nothing, no step waits for it again.
        wait = 0.0 if self._spans_said and rx.requests_kept == 0 else self.cfg.otlp_wait_s
        got = rx.wait_for((r.trace_id for r in ok), wait)  # type: ignore[misc]
        if not got and not self._spans_said:
            self._spans_said = True
            why = (
                f"it sent {rx.bodies_refused} the receiver refused: {rx.last_refusal}"
                if rx.bodies_refused
                else f"none came in {wait:g} s"
            )
            self.progress.message(
                f"note: step {index}: no request spans from the engine ({why}); start vLLM "
                f"with --otlp-traces-endpoint {rx.endpoint} and {PROTOCOL_HINT}"
            )
        joined = [(r.ttft, got[r.trace_id]) for r in ok if r.trace_id in got]
        parts = median_request_parts(joined)  # type: ignore[arg-type]
        if parts is not None:
            parts["of"] = len(ok)
        return parts

    # -- the whole sweep -------------------------------------------------------------------
    def run(self) -> SweepResult:
        c = self.cfg
        self.out.mkdir(parents=True, exist_ok=True)
        env = environment_info(self.argv)
        steps_file = self.out / "steps.jsonl"
        if self.resume:
            self.steps = [s for s in jsonl.read_steps(steps_file) if s.mode == c.mode]
            if self.steps:
                self.progress.message(f"resuming after {len(self.steps)} measured steps")
        elif steps_file.exists() and steps_file.stat().st_size > 0:
            raise HeadroomError(f"{steps_file} already holds steps: use --resume, or another --out")
        plan = self._plan()
        worker_cfg = c.worker.model_copy(update={"trace_context": bool(c.otlp_listen)})
        self.driver = LocustDriver(
            worker_cfg, c.mode, self.out, c.workers, c.external_workers,
            master_bind=c.master_bind, master_port=c.master_port, python=self.python,
        )  # fmt: skip
        self.driver.target = (None, None)
        if self.sampler is not None:
            self.sampler.load_provider = self._load_figures
            self.sampler.start()
        since = time.monotonic()
        stopped = "complete"
        error: HeadroomError | None = None
        self.probe.start()
        warm: threading.Thread | None = None
        try:
            if c.otlp_listen:
                host, _, port = c.otlp_listen.rpartition(":")
                self.traces = TraceReceiver(host or "127.0.0.1", int(port))
                self.progress.message(
                    f"listening for the engine's request spans at {self.traces.endpoint}"
                )
            warm = warm_up()
            self.driver.start()
            self.before = self._read_before(since)
            index = max((s.index for s in self.steps), default=-1) + 1
            while True:
                x = plan.next(self.steps)
                if x is None:
                    break
                speed = None
                if self.trace:
                    conc, rate, speed = None, float(x), self._speed_of[x]
                else:
                    conc, rate = (int(x), None) if c.mode == "closed" else (None, float(x))
                for attempt in range(1 + max(0, c.stall_retries)):
                    step = self.run_step(index, conc, rate, speed)
                    index += 1
                    self.steps.append(step)
                    jsonl.append_step(steps_file, step)
                    self.progress.step_done(step)
                    if self.on_step is not None:
                        self.on_step(step)
                    if (
                        step.host_stall_s <= _stall_budget(c.step_seconds)
                        or attempt == c.stall_retries
                    ):
                        break
                    self.progress.message(
                        f"step {step.index}: the machine froze; measuring it again"
                    )
                if step.requests_completed == 0 and step.requests_failed > 0:
                    sample = step.errors_sample[0] if step.errors_sample else "unknown error"
                    raise EndpointError(
                        f"every request failed at load {analysis.load_of(step):g}: {sample}"
                    )
                if step.error_ratio > c.error_threshold:
                    stopped = "saturated-by-errors"
                    break
                if (
                    self.before is not None
                    and self.before.saturated
                    and analysis.measured_nothing(step)
                ):
                    # Its requests still wait behind the other traffic: more load only
                    # queues more of them, and every step after would measure nothing too.
                    self.progress.message(
                        f"step {step.index}: nothing came back from behind the other traffic; "
                        "stopping (the box is already saturated)"
                    )
                    stopped = "saturated-before"
                    break
        except KeyboardInterrupt:
            stopped = "interrupted"
        except HeadroomError as exc:
            stopped = f"error: {exc}"
            error = exc
        finally:
            self.probe.stop()
            if self.driver is not None:
                self.driver.stop()
            if self.sampler is not None:
                self.sampler.close()
            if self.traces is not None:
                self.traces.close()
        env.ended = time.time()
        result = self.result(env, stopped)
        if warm is not None:
            warm.join()
        write_all(self.out, result)
        if error is not None:
            raise error
        return result

    def _read_before(self, since: float) -> Before | None:
        """The engine before the first step: what other traffic already holds there.

        Read from the ticks since the sampler started (the load generator starting up sends
        nothing); a box whose requests already wait for room is said at once, as a warning,
        and kept for the verdict: each step's requests queue behind that traffic."""
        if self.sampler is None:
            return None
        interval = self.cfg.sample_interval_s
        deadline = time.monotonic() + 3 * interval + 2.0
        while time.monotonic() < deadline:
            if sum(1 for s in self.sampler.snapshots() if s.t >= since) >= 3:
                break
            time.sleep(0.05)
        window = compute_window(self.sampler.snapshots(), since, time.monotonic())
        ev = engine_view(window, self.caps) if window is not None else None
        if ev is None or ev.running_mean is None:
            return None
        waiting = ev.waiting_p50 if ev.waiting_p50 is not None else ev.waiting_mean
        caps = [e.reported_max_num_seqs or e.seq_cap_reported for e in window.engines]
        before = Before(
            running_mean=_r(ev.running_mean, 3),
            waiting_mean=_r(ev.waiting_mean, 3),
            waiting_p50=_r(ev.waiting_p50, 3),
            seq_cap=sum(caps) if caps and all(caps) else None,  # type: ignore[arg-type]
            verdict=ev.verdict,
        )
        # Running at the sequence cap the engine reports is as full as a queue: the next
        # request waits (the demo's memory-bound box: 256 running of 256, none waiting).
        saturated = (waiting or 0.0) >= analysis.QUEUE_MIN or before.at_cap
        running = (
            f"{ev.running_mean:.0f} running"
            + (f" (its cap {before.seq_cap:g})" if before.at_cap else "")
            + f", {ev.waiting_mean or 0.0:.0f} waiting"
        )
        if saturated:
            summary = (
                f"the box is already saturated by other traffic: {running} before the sweep "
                f"sent anything ({before.cause or 'cause unknown'}); every step's requests "
                "queue behind it, so the steps measure what room is left, not the box"
            )
        elif ev.running_mean >= 0.5:
            summary = (
                f"other traffic on the box: {running} before the sweep sent anything; the "
                "steps measure the room left beside it"
            )
        else:
            summary = ""
        before = before.model_copy(update={"saturated": saturated, "summary": summary})
        if summary:
            word = "warning" if saturated else "note"
            self.progress.message(f"{word}: {summary}")
            self.notes.append(f"{word}: {summary}")
        # At once, for a view following the sweep's files (the demo's sweep screen).
        (self.out / "before.json").write_text(before.model_dump_json(), encoding="utf-8")
        return before

    def _load_figures(self) -> tuple[tuple[str, float], ...]:
        d = self.driver
        if d is None:
            return ()
        figs = list(d.load_figures())
        if self.cfg.worker.turns > 1 and self.cfg.worker.think_time_s > 0:
            # Sessions, not requests: a thinking user is not a generator falling short.
            figs = [(k, v) for k, v in figs if k != "target_concurrency"]
        if d.target[1] is not None:
            figs = [(("target_rate_rps" if k == "target_rate" else k), v) for k, v in figs]
        return tuple(figs)

    def result(self, env: EnvironmentInfo, stopped: str) -> SweepResult:
        c = self.cfg
        saturation = analysis.find_saturation(self.steps, c.gain_threshold, c.error_threshold)
        check = analysis.headroom_check(self.steps, saturation)
        b = self.before
        if b is not None and b.saturated:
            saturation = _saturated_before(b, analysis.effective_steps(self.steps))
            # The first step's estimate is of the box with the other traffic in it, and
            # there is no measured knee to hold it against.
            check = None
        saturation = saturation_energy(self.steps, saturation)
        capacity = None
        if c.target_rate_rps is not None:
            capacity = sweep_capacity(self.steps, c.slos, c.error_threshold, c.target_rate_rps,
                                      c.capacity_margin)  # fmt: skip
        return SweepResult(
            config=c,
            environment=env,
            steps=sorted(self.steps, key=lambda s: s.index),
            saturation=saturation,
            goodput=analysis.find_goodput(self.steps, c.slos, c.error_threshold),
            stopped=stopped,
            notes=self.notes,
            headroom_check=check,
            before=self.before,
            capacity=capacity,
        )


def _saturated_before(b: Before, measured: list[StepResult]) -> Saturation:
    """The verdict on a box whose requests already waited before the sweep: the box's, not a
    load's. Its queue holds every step's requests from the first, so a knee read from the
    steps (queues, a curve that grows as the sweep's share of the box grows) would name a
    load that means nothing; what the steps did show is said beside it."""
    held = (
        f"other traffic already held the box at its limit ({b.running_mean or 0:.0f} running"
        + (f" of {b.seq_cap:g}" if b.at_cap and b.seq_cap is not None else "")
        + f", {b.waiting_mean or 0:.0f} waiting)"
    )
    if not measured:
        why = f"{held}: nothing came back to the sweep"
    else:
        lo, hi = measured[0], measured[-1]
        ttft = (
            f" (TTFT p95 {lo.ttft_p95_s:.3g} s at {analysis.load_of(lo):g}, "
            f"{hi.ttft_p95_s:.3g} s at {analysis.load_of(hi):g})"
            if lo.ttft_p95_s is not None and hi.ttft_p95_s is not None and lo is not hi
            else ""
        )
        top = max(measured, key=lambda s: s.output_tokens_per_s)
        why = (
            f"{held}: the sweep's requests queued behind it from the first step{ttft}; they "
            f"got {top.output_tokens_per_s:.0f} tok/s at {analysis.load_of(top):g}, a share of "
            "the box beside that traffic, not headroom"
        )
    return Saturation(reached=True, cause=b.cause, reason=why)


# Time outside the engine worth a word: this share of the client's TTFT, and at least this long
# (loopback and the generator's own parsing cost a millisecond or two).
OUTSIDE_SHARE = 0.5
OUTSIDE_MIN_S = 0.01


def _with_outside(
    parts: dict | None,
    client_mean: float | None,
    client_p50: float | None,
    client_late: bool = False,
) -> dict | None:
    """The step's TTFT parts with what the client saw beyond the engine. Means throughout:
    they add up (queue + prefill + other + outside = the client's mean TTFT), and engine
    histograms' medians are only as fine as their buckets.

    ``outside_note`` says where time outside the engine that dominates comes from: the
    generator itself where it could not keep up (client-limited), else whatever stands
    between it and the engine."""
    if parts is None:
        return None
    out = dict(parts)
    engine = parts.get("engine_ttft_s")
    outside = None
    if client_mean is not None and engine is not None:
        outside = max(0.0, client_mean - engine)
        out["outside_s"] = round(outside, 6)
    out["client_ttft_mean_s"] = None if client_mean is None else round(client_mean, 6)
    out["client_ttft_p50_s"] = None if client_p50 is None else round(client_p50, 6)
    # The same at the median, where a few long waits pull the mean away from what most
    # requests saw (at a knee the mean ran to five times the median).
    engine_p50 = parts.get("engine_ttft_p50_s")
    out["outside_p50_s"] = (
        round(max(0.0, client_p50 - engine_p50), 6)
        if client_p50 is not None and engine_p50 is not None
        else None
    )
    note = None
    if outside is not None and client_mean and outside >= OUTSIDE_MIN_S:
        share = outside / client_mean
        if share >= OUTSIDE_SHARE:
            where = (
                "the load generator itself is late (client-limited): add workers"
                if client_late
                else "a gateway, proxy or the network between the client and the engine"
            )
            note = f"{100 * share:.0f}% of TTFT is outside the engine ({outside:.3f} s): {where}"
    out["outside_note"] = note
    return out


def _with_median_request(parts: dict | None, median_request: dict | None) -> dict | None:
    """The step's parts with the median request's own (``median_request``: queue, prefill,
    other engine time and outside, averaged over the requests at the client's median TTFT,
    from the engine's spans of each); these add up to the median, as means cannot at a knee."""
    if median_request is None:
        return parts
    return {**(parts or {}), "median_request": median_request}


def step_energy(
    energy: Energy | None, tokens_per_s: float, requests_per_s: float, price: float | None
) -> dict[str, Any]:
    """A step's energy figures: the GPUs' mean power over the hold against what the client
    received in it (tokens and requests per second, exact for the hold)."""
    if energy is None or energy.power_watts is None:
        return {}
    watts = energy.power_watts
    per_token = watts / tokens_per_s if tokens_per_s > 0 else None
    cost = None
    if price is not None and energy.gpus and tokens_per_s > 0:
        cost = price * energy.gpus / 3600.0 / tokens_per_s * 1e6
    return {
        "gpu_power_watts": _r(watts, 2),
        "gpu_energy_joules": _r(energy.joules, 1),
        "energy_source": energy.source,
        "energy_per_token_joules": _r(per_token, 6),
        "energy_per_request_joules": _r(watts / requests_per_s, 4) if requests_per_s > 0 else None,
        "tokens_per_joule": _r(tokens_per_s / watts, 5) if watts > 0 else None,
        "cost_per_million_tokens": _r(cost, 4),
    }
