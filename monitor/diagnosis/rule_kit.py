"""What every diagnosis rule is made of: the context it reads, evidence, verdicts, numbers in words.

Confidences are fixed per rule and lowered, with the source named in
``missing``, when the data that would confirm the verdict was not read. They
order verdicts; they are not calibrated probabilities.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from monitor.diagnosis import figures as fig
from monitor.diagnosis.limits import Load, headroom, load_from_window
from monitor.diagnosis.step_cost import StepCost
from monitor.diagnosis.thresholds import Caps, Thresholds
from monitor.diagnosis.verdict import Cause, Evidence, Verdict
from monitor.sources import metric_names as mn
from monitor.window.scopes import engine_scope
from monitor.window.stats import EngineWindow, GpuWindow, WindowStats

BOX = "box"


def engine_table(e: EngineWindow) -> mn.Flavour:
    """The name table the engine was read with: its settings name the fixes. vLLM's when
    unknown (a recording from before flavours)."""
    return mn.table(e.flavour, e.flavour_version) or mn.VLLM


def num(x: float) -> str:
    """A number as a person would say it: 6.4, 25.6, 128, 0.64."""
    if abs(x) >= 100:
        return f"{x:.0f}"
    return f"{x:.3g}"


def pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def pct_read(x: float | None) -> str:
    return "not read" if x is None else pct(x)


def ev(
    name: str, value: float | None, threshold: float | None = None, op: str = "", unit: str = ""
) -> Evidence:
    return Evidence(name, None if value is None else float(value), threshold, op, unit)


@dataclass(frozen=True)
class Context:
    window: WindowStats
    th: Thresholds
    caps: Caps
    # Caps inferred in earlier windows, by engine scope (the Diagnoser remembers them).
    seen_caps: Mapping[str, fig.SeenCap] = field(default_factory=dict)
    # Each engine's step cost, fitted to earlier windows, by engine scope (the Diagnoser's).
    step_costs: Mapping[str, StepCost] = field(default_factory=dict)
    # The price per GPU-hour the idle part of the bill is quoted at (None: in energy alone).
    gpu_hour_price: float | None = None
    # Each engine's figures that several rules and the analysis use, made once a window.
    _made: dict[tuple[str, int], Any] = field(default_factory=dict, compare=False, repr=False)

    def _once(self, what: str, e: EngineWindow, make: Callable[[], Any]) -> Any:
        key = (what, id(e))
        if key not in self._made:
            self._made[key] = make()
        return self._made[key]

    def seq_cap(self, e: EngineWindow) -> fig.SeqCap:
        seen = self.seen_caps.get(engine_scope(e))
        return self._once("seq_cap", e, lambda: fig.seq_cap(e, self.caps, self.th, seen))

    def token_budget(self, e: EngineWindow) -> fig.TokenBudget:
        return self._once("token_budget", e, lambda: fig.token_budget(e, self.caps, self.th))

    def littles(self, e: EngineWindow) -> fig.Littles:
        return self._once("littles", e, lambda: fig.littles(e, self.th))

    def load(self, e: EngineWindow) -> Load | None:
        """Where each limit binds and the step's parts (limits.load_from_window), made once a
        window: the headroom figure, the rate that fills the cap and the what-if read it."""
        return self._once(
            "load",
            e,
            lambda: load_from_window(
                e,
                self.gpus,
                self.window.host,
                self.seq_cap(e),
                self.token_budget(e),
                self.littles(e),
                self.th,
                self.caps,
                self.step_costs.get(engine_scope(e)),
            ),
        )

    def headroom(self, e: EngineWindow) -> dict[str, Any] | None:
        """How much more load fits (limits.headroom), made once a window."""
        return self._once("headroom", e, lambda: headroom(self.load(e)))

    def cap_fill(self, e: EngineWindow) -> fig.CapFill | None:
        """The rate that fills the sequence cap, as every face says it."""
        load = self.load(e)
        return fig.cap_fill(
            e,
            self.seq_cap(e),
            self.littles(e),
            self.headroom(e),
            None if load is None else load.step.growth,
        )

    @property
    def gpus(self) -> tuple[GpuWindow, ...]:
        return self.window.gpus

    @property
    def has_gpu(self) -> bool:
        return any(g.util is not None for g in self.window.gpus)

    def gpu_evidence(self) -> list[Evidence]:
        out = [ev("gpu_util", fig.util_mean(self.gpus), unit="ratio")]
        sm = fig.sm_active_mean(self.gpus)
        if sm is not None:
            out.append(ev("gpu_sm_active", sm, unit="ratio"))
        return out


def make_verdict(
    cause: Cause,
    confidence: float,
    scope: str,
    evidence: Sequence[Evidence],
    fix: str,
    summary: str,
    missing: Sequence[str] = (),
    since: float | None = None,
) -> Verdict:
    return Verdict(
        cause=cause,
        confidence=round(max(0.0, min(1.0, confidence)), 3),
        scope=scope,
        evidence=tuple(evidence),
        fix=fix,
        summary=summary,
        since=since,
        missing=tuple(missing),
    )
