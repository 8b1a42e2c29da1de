"""What `headroom tune` varies and what it does next: knobs, the launch template, the decision.

Pure functions on text and on recorded sweep results (sweep.json as a dict), so the loop's
choices can be checked without an engine: which knob the saturation's cause names, the
what-if entry for it at the knee, the value to try (clipped to the bound), and why to stop.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from monitor.core.errors import ConfigError

# A change predicted to gain less than this ends the tune (the what-if's own MIN_GAIN).
MIN_GAIN = 1.05

# A knob the user names, as the what-if names it (the engines spell one setting differently:
# vLLM's --num-gpu-blocks-override, the simulator's num_blocks; llama.cpp's --parallel).
WHATIF_KNOB = {
    "max_num_seqs": "max_num_seqs",
    "parallel": "max_num_seqs",
    "max_running_requests": "max_num_seqs",
    "max_num_batched_tokens": "max_num_batched_tokens",
    "num_gpu_blocks": "num_gpu_blocks",
    "num_gpu_blocks_override": "num_gpu_blocks",
    "num_blocks": "num_gpu_blocks",
    "gpu_memory_utilization": "gpu_memory_utilization",
    "ctx_size": "ctx_size",
}
# The limit each what-if knob moves: the saturation cause that names it.
CAUSE_OF = {
    "max_num_seqs": "seq-cap",
    "max_num_batched_tokens": "token-cap",
    "num_gpu_blocks": "kv-cap",
    "gpu_memory_utilization": "kv-cap",
    "ctx_size": "kv-cap",
}
FLOAT_KNOBS = {"gpu_memory_utilization"}
# Placeholders the tune fills itself.
PORT = "port"
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass(frozen=True, slots=True)
class KnobSpec:
    name: str
    start: float  # the first value (adaptive) or the first of the values (grid)
    bound: float | None = None  # adaptive: the farthest value to try
    values: tuple[float, ...] = ()  # grid: every value

    def to_json(self) -> dict[str, Any]:
        if self.values:
            return {"values": list(self.values)}
        return {"start": self.start, "bound": self.bound}


def _number(name: str, text: str, spec: str) -> float:
    kind = float if name in FLOAT_KNOBS else int
    try:
        value = kind(text.strip())
    except ValueError:
        what = "numbers" if kind is float else "integers"
        raise ConfigError(
            f"--knob {spec}: want NAME=START:BOUND or NAME=V1,V2,... ({what})"
        ) from None
    if value <= 0:
        raise ConfigError(f"--knob {spec}: values must be above 0")
    return value


def parse_knob(spec: str, grid: bool) -> KnobSpec:
    """'max_num_seqs=8:256' (adaptive: start and bound) or 'max_num_seqs=8,16,32' (--grid)."""
    name, sep, rest = spec.partition("=")
    name = name.strip().replace("-", "_")
    if not sep or not name or not rest.strip():
        raise ConfigError(f"--knob {spec}: want NAME=START:BOUND, e.g. max_num_seqs=8:256")
    if name not in WHATIF_KNOB:
        raise ConfigError(f"--knob {spec}: unknown knob {name} (known: {', '.join(WHATIF_KNOB)})")
    if grid:
        if ":" in rest:
            raise ConfigError(f"--knob {spec}: --grid wants the values, e.g. {name}=8,16,32")
        values = tuple(_number(name, x, spec) for x in rest.split(","))
        return KnobSpec(name, values[0], None, values)
    if "," in rest:
        raise ConfigError(f"--knob {spec}: a list of values is for --grid; want {name}=START:BOUND")
    start_text, colon, bound_text = rest.partition(":")
    start = _number(name, start_text, spec)
    bound = _number(name, bound_text, spec) if colon else start
    if bound < start:
        raise ConfigError(f"--knob {spec}: the bound is below the start")
    return KnobSpec(name, start, bound)


def parse_knobs(specs: Sequence[str], grid: bool) -> list[KnobSpec]:
    if not specs:
        raise ConfigError(
            "give the knobs to vary: --knob NAME=START:BOUND (e.g. max_num_seqs=8:256)"
        )
    knobs = [parse_knob(s, grid) for s in specs]
    names = [k.name for k in knobs]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup:
        raise ConfigError(f"--knob {dup} is given twice")
    return knobs


def check_template(flag: str, template: str, knobs: Sequence[KnobSpec], need_all: bool) -> None:
    """Every knob has its placeholder (where ``need_all``), every placeholder is a knob or {port}."""
    found = set(_PLACEHOLDER.findall(template))
    known = {k.name for k in knobs} | {PORT}
    extra = sorted(found - known)
    if extra:
        raise ConfigError(f"{flag}: {{{extra[0]}}} is no --knob (nor {{port}})")
    if need_all:
        missing = [k.name for k in knobs if k.name not in found]
        if missing:
            raise ConfigError(f"{flag} has no {{{missing[0]}}} for --knob {missing[0]}")


def fill(template: str, values: Mapping[str, Any]) -> str:
    def one(m: re.Match[str]) -> str:
        v = values[m.group(1)]
        return f"{v:g}" if isinstance(v, float) else str(v)

    return _PLACEHOLDER.sub(one, template)


def grid_configs(knobs: Sequence[KnobSpec]) -> list[dict[str, float]]:
    """Every combination of the values, in order (the first knob slowest)."""
    combos = itertools.product(*(k.values or (k.start,) for k in knobs))
    return [dict(zip([k.name for k in knobs], c, strict=True)) for c in combos]


def start_config(knobs: Sequence[KnobSpec]) -> dict[str, float]:
    return {k.name: k.start for k in knobs}


# -- a run's sweep, summarised ---------------------------------------------------------------


def summarise(sweep: Mapping[str, Any]) -> dict[str, Any]:
    """A sweep.json's figures a tune compares: the knee, its throughput and cause, the SLO."""
    sat = sweep.get("saturation") or {}
    steps = [s for s in sweep.get("steps") or [] if s.get("valid")]
    tok = sat.get("output_tokens_per_s")
    conc = sat.get("concurrency")
    if tok is None and steps:
        # Never saturated (or saturated before): the best the sweep measured stands for it.
        best = max(steps, key=lambda s: s.get("output_tokens_per_s") or 0.0)
        tok, conc = best.get("output_tokens_per_s"), best.get("concurrency")
    good = sweep.get("goodput")
    return {
        "saturated": bool(sat.get("reached")),
        "saturation_concurrency": conc,
        "throughput_tok_s": None if tok is None else round(float(tok), 1),
        "cause": sat.get("cause"),
        "slo_pass": None if good is None else bool(good.get("met")),
        "goodput_concurrency": None if good is None else good.get("concurrency"),
        "goodput_tok_s": None
        if good is None or not good.get("met")
        else round(float(good.get("output_tokens_per_s") or 0.0), 1),
    }


def score(run: Mapping[str, Any], slo: bool) -> float:
    """What a run is ranked by: throughput at the knee, or at the SLO where one is given."""
    if run.get("status") != "ok":
        return -1.0
    value = run.get("goodput_tok_s") if slo else run.get("throughput_tok_s")
    return float(value or 0.0)


def best_run(runs: Sequence[Mapping[str, Any]], slo: bool) -> dict[str, Any] | None:
    ok = [r for r in runs if r.get("status") == "ok"]
    if not ok:
        return None
    b = max(ok, key=lambda r: score(r, slo))
    return {
        "run": b["index"],
        "knobs": dict(b["knobs"]),
        "throughput_tok_s": b.get("throughput_tok_s"),
        "goodput_tok_s": b.get("goodput_tok_s"),
        "saturation_concurrency": b.get("saturation_concurrency"),
    }


# -- the next change -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Decision:
    """The change to make next, or why none (``stop``)."""

    stop: str | None = None
    knob: str | None = None
    current: float | None = None
    proposed: float | None = None  # the what-if's value
    to: float | None = None  # clipped to the bound
    gain: float | None = None  # predicted throughput over the knee's, at ``to``
    predicted_tok_s: float | None = None
    whatif: dict[str, Any] | None = None
    step_concurrency: int | None = None  # the step whose window the what-if came from

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__slots__ if getattr(self, k) is not None}


def _steps_from_knee(sweep: Mapping[str, Any], knee: float | None) -> list[dict[str, Any]]:
    steps = [s for s in sweep.get("steps") or [] if s.get("valid") and s.get("concurrency")]
    steps.sort(key=lambda s: s["concurrency"])
    if knee is None:
        return steps[::-1]
    # The knee's own window first, then the steps past it, where the limit shows.
    return [s for s in steps if s["concurrency"] >= knee]


def _whatif_for(
    sweep: Mapping[str, Any], knee: float | None, knob: str
) -> tuple[dict[str, Any], int] | None:
    want = WHATIF_KNOB[knob]
    for s in _steps_from_knee(sweep, knee):
        for w in s.get("whatif") or []:
            if w.get("knob") == want and w.get("proposed") is not None:
                return w, s["concurrency"]
    return None


def _value(knob: KnobSpec, v: float) -> float:
    """A whole-number knob's value as an integer (in tune.json and the next command)."""
    return v if knob.name in FLOAT_KNOBS else int(v)


def _clip(knob: KnobSpec, value: float) -> float:
    v = min(value, knob.bound if knob.bound is not None else value)
    return v if knob.name in FLOAT_KNOBS else float(int(v))


def decide(
    sweep: Mapping[str, Any],
    run: Mapping[str, Any],
    knobs: Sequence[KnobSpec],
    current: Mapping[str, float],
) -> Decision:
    """The knob the knee's cause names, moved as the what-if at the knee says (within its
    bound), or why the tune stops here."""
    cause = run.get("cause")
    if run.get("slo_pass") is False:
        return Decision(stop="the SLO binds: no step met it")
    g, k = run.get("goodput_concurrency"), run.get("saturation_concurrency")
    if run.get("slo_pass") and g is not None and k is not None and g < k:
        return Decision(stop=f"the SLO binds before the knee (met up to {g:g}, knee at {k:g})")
    if not run.get("saturated"):
        return Decision(stop="the sweep found no knee (raise --max-concurrency)")
    if cause == "client-limited":
        # The engine had room the load generator could not fill: no knob of the engine's helps.
        return Decision(stop="the load generator was the limit at the knee (client-limited), "
                        "not the engine: its next knee is unmeasured here")  # fmt: skip
    named = [x for x in knobs if CAUSE_OF[WHATIF_KNOB[x.name]] == cause]
    if not named:
        given = ", ".join(x.name for x in knobs)
        return Decision(
            stop=f"the cause, {cause or 'unknown'}, has no knob among those given ({given})"
        )
    reasons = []
    for knob in named:
        now = current[knob.name]
        if knob.bound is not None and now >= knob.bound:
            reasons.append(f"{knob.name} is at its bound {knob.bound:g}")
            continue
        found = _whatif_for(sweep, k, knob.name)
        if found is None:
            reasons.append(f"no what-if for {knob.name} at the knee")
            continue
        w, at = found
        p = w.get("predicted") or {}
        gain = float(p.get("gain") or 0.0)
        proposed = float(w["proposed"])
        # The what-if's step is from the engine's reading of today's value; the tune's own
        # value is what it launched with.
        scale = proposed / float(w["current"]) if w.get("current") else proposed / now
        target = now * scale if w.get("current") and float(w["current"]) != now else proposed
        to = _clip(knob, target)
        if to <= now:
            reasons.append(f"{knob.name} is at its bound {knob.bound:g}")
            continue
        if to < target and target > now:
            # Clipped: the gain grows with the knob up to the limit it proposed to reach.
            gain = 1.0 + (gain - 1.0) * (to - now) / (target - now)
        if gain < MIN_GAIN:
            reasons.append(
                f"{knob.name} {now:g} -> {to:g} is predicted to gain {gain:.2f}x (< {MIN_GAIN}x)"
            )
            continue
        base = run.get("throughput_tok_s") or 0.0
        return Decision(
            knob=knob.name,
            current=_value(knob, now),
            proposed=_value(knob, proposed),
            to=_value(knob, to),
            gain=round(gain, 3),
            predicted_tok_s=round(base * gain, 1),
            whatif=dict(w),
            step_concurrency=at,
        )
    return Decision(stop="; ".join(reasons))


def prediction_row(prev: Mapping[str, Any], run: Mapping[str, Any]) -> dict[str, Any] | None:
    """A change's prediction beside what the run it led to measured."""
    d = prev.get("decision") or {}
    if d.get("knob") is None or run.get("status") != "ok":
        return None
    measured = run.get("throughput_tok_s")
    predicted = d.get("predicted_tok_s")
    return {
        "run": prev["index"],
        "measured_run": run["index"],
        "knob": d["knob"],
        "from": d["current"],
        "to": d["to"],
        "predicted_tok_s": predicted,
        "measured_tok_s": measured,
        "ratio": round(predicted / measured, 3) if predicted and measured else None,
        "predicted_next_limit": ((d.get("whatif") or {}).get("predicted") or {}).get("limit"),
        "measured_cause": run.get("cause"),
    }
