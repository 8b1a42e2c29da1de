"""What the diagnosis says: a cause, how sure, the numbers that decided it, and the fix."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Cause = Literal[
    "idle",
    "starved",
    "seq-cap",
    "kv-cap",
    "token-cap",
    "cpu-bound",
    "launch-bound",
    "small-kernels",
    "transfer-bound",
    "compute-bound",
    "memory-bound",
    "comm-bound",
    "contended",
    "client-limited",
    "unknown",
]

CAUSES: tuple[Cause, ...] = (
    "idle", "starved", "seq-cap", "kv-cap", "token-cap", "cpu-bound", "launch-bound",
    "small-kernels", "transfer-bound", "compute-bound", "memory-bound", "comm-bound",
    "contended", "client-limited", "unknown",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Evidence:
    """One number that decided a verdict, with the threshold it was held against."""

    name: str  # e.g. "waiting_mean"
    value: float | None
    threshold: float | None = None
    op: str = ""  # ">", "<", ">=", "<=", "~" or "" for context only
    unit: str = ""  # "ratio", "req/s", "s", "cores", ...

    def relation(self) -> str:
        """The relation that actually holds between value and threshold.

        A rule records the test it applied (``op``); when the value failed that test
        (a rule that fired on other evidence, or a boundary shown for context), printing
        ``op`` would state something false, so the shown relation is the true one.
        """
        if self.value is None or self.threshold is None or self.op not in _TESTS:
            return self.op
        if _TESTS[self.op](self.value, self.threshold):
            return self.op
        return _NEGATION[self.op]

    def describe(self) -> str:
        v = "n/a" if self.value is None else f"{self.value:.3g}"
        unit = f" {self.unit}" if self.unit else ""
        if self.threshold is None or not self.op:
            return f"{self.name}={v}{unit}"
        return f"{self.name}={v} {self.relation()} {self.threshold:.3g}{unit}"


_TESTS = {
    ">": lambda v, t: v > t,
    ">=": lambda v, t: v >= t,
    "<": lambda v, t: v < t,
    "<=": lambda v, t: v <= t,
}
_NEGATION = {">": "<=", ">=": "<", "<": ">=", "<=": ">"}


@dataclass(frozen=True, slots=True)
class Verdict:
    cause: Cause
    confidence: float  # 0-1
    scope: str  # "gpu:0", "engine:http://host:8000/metrics#model/0", or "box"
    evidence: tuple[Evidence, ...]
    fix: str  # the first thing to try, concrete
    summary: str  # one line in words
    since: float | None = None  # wall time it started (set by hysteresis)
    missing: tuple[str, ...] = ()  # sources whose absence lowered confidence
    # cpu-bound: the engine thread's Python profile (monitor.profiling.stacks.CpuProfile),
    # written into the evidence as one entry named "cpu_profile".
    cpu_profile: Any = None
    # GPU causes: the exact next command for a profiler that sees kernels, for this box.
    next: str = ""
    # Shown under a lead it outscored: its own confidence, the shown one capped at the lead's.
    confidence_alone: float | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "cause": self.cause,
            "confidence": round(self.confidence, 3),
            "scope": self.scope,
            "summary": self.summary,
            "fix": self.fix,
            "since": self.since,
            "missing": list(self.missing),
            "next": self.next or None,
            "confidence_alone": None
            if self.confidence_alone is None
            else round(self.confidence_alone, 3),
            "evidence": [
                {
                    "name": e.name,
                    "value": e.value,
                    "threshold": e.threshold,
                    "op": e.relation(),
                    "test": e.op,
                    "unit": e.unit,
                }
                for e in self.evidence
            ]
            + (
                [
                    {
                        "name": "cpu_profile",
                        "value": None,
                        "threshold": None,
                        "op": "",
                        "test": "",
                        "unit": "",
                        "profile": self.cpu_profile.to_json(),
                    }
                ]
                if self.cpu_profile is not None
                else []
            ),
        }
