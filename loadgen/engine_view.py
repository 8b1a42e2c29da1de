"""The monitor's side of a step: engine and GPU figures over the hold, and the verdict."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from loadgen.schema import GpuActivity
from monitor.diagnosis import Caps, diagnose
from monitor.diagnosis.energy import Energy, window_energy
from monitor.window.scopes import engine_scope
from monitor.window.stats import WindowStats


def _sum(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) if present else None


def _mean(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


def _median(values: tuple[float, ...]) -> float | None:
    return statistics.median(values) if values else None


@dataclass(frozen=True)
class EngineView:
    gpu: GpuActivity
    running_mean: float | None = None
    running_max: float | None = None
    waiting_mean: float | None = None
    waiting_max: float | None = None
    waiting_p50: float | None = None
    waiting_growth: float | None = None
    kv_cache_usage_mean: float | None = None
    preemptions_per_s: float | None = None
    generation_tokens_per_s: float | None = None
    prefix_cache_hit_rate: float | None = None
    verdict: str | None = None
    verdict_confidence: float | None = None
    verdict_summary: str | None = None
    verdicts: list[dict[str, Any]] = field(default_factory=list)
    # The first engine's headroom figure and TTFT parts over the hold (figures.engine_analysis).
    headroom: dict[str, Any] | None = None
    ttft_parts: dict[str, Any] | None = None
    whatif: list[dict[str, Any]] | None = None
    # Readings of the engine's gauges over the hold (the fewest of any engine): what the
    # in-flight mean's resolution is.
    readings: int | None = None
    # The GPUs' energy over the hold (None: no window).
    energy: Energy | None = None

    @property
    def in_flight(self) -> float | None:
        if self.running_mean is None:
            return None
        return self.running_mean + (self.waiting_mean or 0.0)


def engine_view(window: WindowStats, caps: Caps | None = None) -> EngineView:
    """The step's figures and its one diagnosis: the verdict, the headroom figure and the
    what-if come from it together, with the engine's caps as the user gave them."""
    es = window.engines
    gs = window.gpus
    gpu = GpuActivity(
        util=_mean([g.util for g in gs]),
        sm_active=_mean([g.sm_active for g in gs]),
        tensor_active=_mean([g.tensor_active for g in gs]),
        dram_active=_mean([g.dram_active for g in gs]),
        gpus=len(gs),
    )
    growth = _sum(
        [
            None
            if e.waiting_last is None or e.waiting_first is None
            else e.waiting_last - e.waiting_first
            for e in es
        ]
    )
    verdict = None
    first: dict[str, Any] = {}
    if window.samples:
        diagnosis = diagnose(window, caps=caps or Caps())
        verdict = diagnosis.top
        verdicts = [v.to_json() for v in diagnosis.verdicts]
        if es:
            first = dict(diagnosis.analyses.get(engine_scope(es[0]), {}))
    else:
        verdicts = []
    return EngineView(
        gpu=gpu,
        running_mean=_sum([e.running_mean for e in es]),
        running_max=_sum([e.running_max for e in es]),
        waiting_mean=_sum([e.waiting_mean for e in es]),
        waiting_max=_sum([e.waiting_max for e in es]),
        waiting_p50=_sum([_median(e.waiting_series) for e in es]),
        waiting_growth=growth,
        kv_cache_usage_mean=_mean([e.kv_cache_usage_mean for e in es]),
        preemptions_per_s=_sum([e.preemptions_per_s for e in es]),
        generation_tokens_per_s=_sum([e.generation_tokens_per_s for e in es]),
        # One hit rate for the box: engines' rates are not weighted by their queries here,
        # which matters only with several engines of unequal load.
        prefix_cache_hit_rate=_mean([e.prefix_cache_hit_rate for e in es]),
        verdict=None if verdict is None else verdict.cause,
        verdict_confidence=None if verdict is None else round(verdict.confidence, 3),
        verdict_summary=None if verdict is None else verdict.summary,
        verdicts=verdicts,
        headroom=first.get("headroom"),
        ttft_parts=first.get("ttft_parts"),
        whatif=first.get("whatif"),
        readings=min((e.samples for e in es), default=None),
        energy=window_energy(window),
    )
