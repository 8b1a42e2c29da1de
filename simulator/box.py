"""One simulated serving box: engine, statistics, GPU timeline and built-in load, on any clock.

``Box`` holds the parts; ``Simulator`` runs them on a virtual clock (as fast as
Python goes: physics tests), ``EngineThread`` in real time (the server).
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.config import SimConfig
from simulator.engine import EngineCore, Request, Step
from simulator.gpu_timeline import Activity, GpuTimeline
from simulator.load import BuiltinLoad
from simulator.scenarios import build
from simulator.stats import Stats


class Box:
    def __init__(
        self, cfg: SimConfig, now: float, load: bool = True, stats: Stats | None = None
    ) -> None:
        self.cfg = cfg
        self.stats = stats if stats is not None else Stats()
        self.core = EngineCore(cfg.engine, self.stats)
        self.timeline = GpuTimeline(origin=now)
        self.load = BuiltinLoad(cfg.load, now) if load and cfg.load.mode != "none" else None

    def admit_arrivals(self, now: float) -> None:
        if self.load is not None:
            for req in self.load.arrivals(now):
                self.core.add(req)

    @property
    def next_due(self) -> float:
        return self.load.next_due if self.load is not None else float("inf")

    def gpu_activity(self, now: float, period_s: float | None = None) -> Activity:
        return self.timeline.activity(now, period_s or self.cfg.engine.gpu_sample_period_s)

    def gpu_energy_j(self, now: float) -> float:
        """Each board's energy since the box started, from its modelled power."""
        gpu = self.cfg.engine.gpu_spec
        return self.timeline.energy_j(now, gpu.idle_watts, gpu.tdp_watts)


@dataclass(frozen=True, slots=True)
class StepRecord:
    t_start: float
    t_end: float
    running: int  # after scheduling: the sequences in this step's batch and beyond
    waiting: int
    kv_usage: float
    tokens: int
    prefill_tokens: int
    preempted: int
    gpu_busy_s: float
    gpu_phase_s: float
    host_cpu_s: float
    compute_bound: bool


class Simulator:
    """The box on a virtual clock: ``run_for`` advances simulated seconds in milliseconds of CPU."""

    def __init__(
        self,
        config: SimConfig | str = "idle",
        *,
        load: bool = True,
        engine: dict | None = None,
        load_overrides: dict | None = None,
        record: bool = True,
    ) -> None:
        cfg = (
            build(config, engine=engine, load=load_overrides) if isinstance(config, str) else config
        )
        self.now = 0.0
        self.box = Box(cfg, self.now, load=load)
        self.records: list[StepRecord] = []
        self._record = record
        self.finished: list[Request] = []

    @property
    def core(self) -> EngineCore:
        return self.box.core

    @property
    def stats(self) -> Stats:
        return self.box.stats

    @property
    def cfg(self) -> SimConfig:
        return self.box.cfg

    def submit(self, prompt_tokens: int, max_tokens: int, ignore_eos: bool = True) -> Request:
        req = Request(
            prompt_tokens=prompt_tokens,
            max_tokens=max_tokens,
            arrival=self.now,
            ignore_eos=ignore_eos,
        )
        self.core.add(req)
        return req

    def step(self) -> Step | None:
        """Run one engine step; None (and no time passes) when there is nothing to run."""
        box = self.box
        box.admit_arrivals(self.now)
        step = box.core.schedule()
        if step is None:
            return None
        running, waiting = len(box.core.running), len(box.core.waiting)
        t0, t1 = self.now, self.now + step.duration_s
        box.timeline.add(t0 + step.gpu_offset_s, step.gpu)
        for em in box.core.commit(step, t0, t1):
            if em.finish_reason is not None:
                self.finished.append(em.request)
        if self._record:
            self.records.append(
                StepRecord(
                    t0, t1, running, waiting, box.core.kv_usage, step.tokens, step.prefill_tokens,
                    step.preempted, step.gpu.busy_s, step.gpu.phase_s, step.host_cpu_s,
                    step.gpu.compute_bound,
                )
            )  # fmt: skip
        self.now = t1
        return step

    def run_for(self, seconds: float) -> None:
        self.run_until(self.now + seconds)

    def run_until(self, t_end: float) -> None:
        while self.now < t_end:
            if self.step() is None:
                nxt = self.box.next_due
                # Idle: jump to the next arrival (nothing due, or nothing that fits: the end).
                self.now = min(nxt, t_end) if nxt > self.now else t_end

    def gpu_activity(self, period_s: float | None = None) -> Activity:
        return self.box.gpu_activity(self.now, period_s)

    def gpu_energy_j(self) -> float:
        return self.box.gpu_energy_j(self.now)

    def window(self, t_from: float, t_to: float) -> list[StepRecord]:
        return [r for r in self.records if r.t_start >= t_from and r.t_end <= t_to]
