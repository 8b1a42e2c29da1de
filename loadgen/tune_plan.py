"""What `headroom tune` varies and what it does next: knobs, the launch template, the decision.

Pure functions on text and on recorded sweep results (sweep.json as a dict), so the loop's
choices can be checked without an engine: which knob the saturation's cause names, the
what-if entry for it at the knee, the value to try (clipped to the bound), and why to stop.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from monitor.core.errors import ConfigError

# A change predicted to gain less than this ends the tune (the what-if's own MIN_GAIN).
MIN_GAIN = 1.05
# Past the GPU's knee where caps bind with it: caps within this of the running sequences
# (limits.MARGIN) are raised together by this much (whatif.STEP).
MARGIN = 1.2
STEP = 2.0

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
# The sweep's causes that name the GPU itself (no knob moves them).
GPU_CAUSES = ("compute-bound", "memory-bound")
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
    # The what-if's change after this one, for the limit that then binds, where its knob is
    # given too: made in the same relaunch ({knob, current, proposed, to}).
    also: list[dict[str, Any]] | None = None
    # Why this change, where the cause did not name it: the load generator set the knee
    # (client-limited), so the engine's what-if at the knee chose it and the next run's
    # measurement decides.
    note: str | None = None
    # How a step grew with the sequences over the sweep's own steps up to the knee, where the
    # gain was read from it ({exponent, steps: [concurrency, concurrency]}).
    step_growth: dict[str, Any] | None = None
    # A pair made in one relaunch whose first change stopped short of a doubling: both
    # values stretched by this ratio (the what-if's ``proposed`` stays as it said).
    stretch: float | None = None

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
    sweep: Mapping[str, Any], knee: float | None, knob: KnobSpec, knobs: Sequence[KnobSpec]
) -> tuple[list[dict[str, Any]], int, KnobSpec] | None:
    """The what-if at the knee (the knee's own step first) with a change that moves ``knob``:
    from that change on, with the changes after it, the step it was taken at, and the knob
    its first change moves. A change on top of one before it (where two caps bind together:
    raising either alone buys nothing) is made with that one, from the chain's first change,
    where its knob is given too."""
    want = WHATIF_KNOB[knob.name]
    for s in _steps_from_knee(sweep, knee):
        chain = [w for w in s.get("whatif") or [] if w.get("proposed") is not None]
        for i, w in enumerate(chain):
            if w.get("knob") != want:
                continue
            lead = next((x for x in knobs if WHATIF_KNOB[x.name] == chain[0].get("knob")), None)
            if i and lead is not None:
                return chain, s["concurrency"], lead
            return chain[i:], s["concurrency"], knob
    return None


def _blind_spent(run: Mapping[str, Any], before: Mapping[str, Any] | None) -> str | None:
    """Where the change that led here was made on the engine's what-if alone (a decision with
    a note) and measured a gain under MIN_GAIN: in words, else None."""
    blind = before is not None and (before.get("decision") or {}).get("note")
    was, now_tok = (before or {}).get("throughput_tok_s"), run.get("throughput_tok_s")
    if blind and was and now_tok is not None and now_tok < was * MIN_GAIN:
        return f"the change made past the last one measured x{now_tok / was:.2f} (< {MIN_GAIN}x)"
    return None


def _step_growth(sweep: Mapping[str, Any], knee: float) -> tuple[float, int, int] | None:
    """How a step lengthens with the sequences running, fitted to the sweep's own two
    highest steps up to the knee: a step takes running / tokens-per-second, and grows as
    running ** exponent between them. (exponent, the two steps' concurrencies), or None."""
    steps = sorted(
        (s for s in sweep.get("steps") or []
         if s.get("valid") and s.get("concurrency") and s["concurrency"] <= knee
         and (s.get("running_mean") or 0.0) > 0 and (s.get("output_tokens_per_s") or 0.0) > 0),
        key=lambda s: s["concurrency"],
    )  # fmt: skip
    hi = steps[-1] if steps else None
    lo = next(
        (s for s in steps[::-1] if hi and s["running_mean"] * 1.3 <= hi["running_mean"]), None
    )
    if hi is None or lo is None:
        return None
    t_lo = lo["running_mean"] / lo["output_tokens_per_s"]
    t_hi = hi["running_mean"] / hi["output_tokens_per_s"]
    exponent = math.log(t_hi / t_lo) / math.log(hi["running_mean"] / lo["running_mean"])
    return min(max(exponent, 0.0), 1.0), lo["concurrency"], hi["concurrency"]


def _knee_limits(sweep: Mapping[str, Any], knee: float | None) -> Mapping[str, float]:
    """The knee's headroom figure's limits (factors on its running sequences), or none."""
    step = next((s for s in _steps_from_knee(sweep, knee) if s.get("headroom")), None)
    return dict((step or {}).get("headroom", {}).get("limits") or {})


def _stretch(
    knob: KnobSpec,
    now: float,
    to: float,
    also: list[dict[str, Any]],
    knobs: Sequence[KnobSpec],
    limits: Mapping[str, float],
) -> tuple[float, list[dict[str, Any]], float]:
    """A pair made in one relaunch whose first change stops short of a doubling: the
    what-if sized it just past the cap the second change raises, for a user who makes it
    alone. Made together, both are stretched by one ratio toward the first's doubling, short
    of any other limit (the knee's headroom figure, by MARGIN) and within their bounds: a
    launch saved. (new first value, the second change, the ratio made; 1.0: unchanged.)"""
    second = also[0]
    spec = next((x for x in knobs if x.name == second["knob"]), None)
    if spec is None or not to or not second.get("to"):
        return to, also, 1.0
    r = STEP * now / to
    mine = CAUSE_OF[WHATIF_KNOB[knob.name]]
    pair = {mine, CAUSE_OF[WHATIF_KNOB[spec.name]]}
    others = [f for c, f in limits.items() if c not in pair]
    if others and limits.get(mine):
        # The pair's limit once made: the first cap's factor grown by its change.
        r = min(r, MARGIN * min(others) * now / (limits[mine] * to))
    for k, v in ((knob, to), (spec, float(second["to"]))):
        if k.bound is not None:
            r = min(r, k.bound / v)
    if r <= 1.0 or knob.name in FLOAT_KNOBS or spec.name in FLOAT_KNOBS:
        return to, also, 1.0
    new_to = _clip(knob, to * r)
    new_second = _clip(spec, math.ceil(float(second["to"]) * r - 1e-9))
    made = min(new_to / to, new_second / float(second["to"]))
    if made <= 1.0:
        return to, also, 1.0
    return new_to, [{**second, "to": _value(spec, new_second)}, *also[1:]], made


def _steps_assumed_flat(w: Mapping[str, Any]) -> bool:
    """The what-if read no GPU and assumed steps that do not lengthen with the batch."""
    assumed = (w.get("basis") or {}).get("assumed") or []
    return any("no GPU activity read" in a for a in assumed)


def _past_the_gpu_knee(
    sweep: Mapping[str, Any],
    run: Mapping[str, Any],
    knobs: Sequence[KnobSpec],
    current: Mapping[str, float],
    cause: str,
) -> Decision | None:
    """The GPU named at a knee where caps bind too (within MARGIN of the running sequences,
    by the knee's headroom figure) and the what-if, whose step model puts the GPU's knee at
    or before them, proposes nothing. A GPU's knee is soft, and how far it still gives is
    measured below it: the caps' knobs doubled together, the gain read off the step's growth
    with the sequences over the sweep's own highest steps (not the GPU's activity). Made where
    that gain is MIN_GAIN or more; the next run measures it, and one that gained less ends the
    tune."""
    k = run.get("saturation_concurrency")
    knee = next((s for s in _steps_from_knee(sweep, k) if s.get("headroom")), None)
    fit = None if k is None else _step_growth(sweep, k)
    if knee is None or fit is None:
        return None
    limits = knee["headroom"].get("limits") or {}
    bound_now = {c: f for c, f in limits.items() if c in CAUSE_OF.values() and f <= MARGIN}
    moves = []
    for knob in knobs:
        cap = CAUSE_OF[WHATIF_KNOB[knob.name]]
        if cap not in bound_now or knob.name in FLOAT_KNOBS or knob.name in ("ctx_size",):
            continue
        now = current[knob.name]
        to = _clip(knob, now * STEP)
        if to > now:
            moves.append((knob, now, to, bound_now[cap] * to / now))
    if not moves:
        return None
    raised = {CAUSE_OF[WHATIF_KNOB[m[0].name]] for m in moves}
    # The running sequences once made: the lowest of the raised caps and any cap not raised.
    f_new = min([m[3] for m in moves] + [f for c, f in limits.items()
                                         if c in CAUSE_OF.values() and c not in raised])  # fmt: skip
    f_now = max(1.0, min(bound_now.values()))
    exponent, lo, hi = fit
    gain = (f_new / f_now) ** (1.0 - exponent)
    if gain < MIN_GAIN:
        return None
    first, *rest = moves
    limit = min(raised, key=lambda c: next(m[3] for m in moves
                                           if CAUSE_OF[WHATIF_KNOB[m[0].name]] == c))  # fmt: skip
    entry = {
        "knob": WHATIF_KNOB[first[0].name], "current": _value(first[0], first[1]),
        "proposed": _value(first[0], first[2]),
        "predicted": {"limit": limit, "gain": round(gain, 3)},
        "basis": {"measured": [f"a step grows as running ** {exponent:.2f} between the "
                               f"sweep's steps at {lo:g} and {hi:g}"],
                  "assumed": ["the step keeps growing so past the knee"]},
    }  # fmt: skip
    base = run.get("throughput_tok_s") or 0.0
    return Decision(
        knob=first[0].name, current=_value(first[0], first[1]), proposed=_value(first[0], first[2]),
        to=_value(first[0], first[2]), gain=round(gain, 3), predicted_tok_s=round(base * gain, 1),
        whatif=entry, step_concurrency=knee["concurrency"],
        step_growth={"exponent": round(exponent, 3), "steps": [lo, hi]},
        also=[{"knob": m[0].name, "current": _value(m[0], m[1]), "proposed": _value(m[0], m[2]),
               "to": _value(m[0], m[2]), "limit": limit} for m in rest] or None,
        note=(f"the sweep named {cause} at the knee, where "
              f"{' and '.join(sorted(raised))} bind too and the what-if (its GPU's knee at "
              f"them) proposes nothing: a step grew as running ** {exponent:.2f} up to the "
              "knee, so the caps are doubled together; the next run measures it"),
    )  # fmt: skip


def _knobs_at_knee(
    sweep: Mapping[str, Any], knee: float | None, knobs: Sequence[KnobSpec]
) -> list[KnobSpec]:
    """The given knobs in the order the what-if at the knee names them (its leading change
    first): where the load generator set the knee, the engine's own reading of its limits."""
    for s in _steps_from_knee(sweep, knee):
        names = [w.get("knob") for w in s.get("whatif") or [] if w.get("proposed") is not None]
        order = [x for n in names for x in knobs if WHATIF_KNOB[x.name] == n]
        if order:
            return order
    return []


def _value(knob: KnobSpec, v: float) -> float:
    """A whole-number knob's value as an integer (in tune.json and the next command)."""
    return v if knob.name in FLOAT_KNOBS else int(v)


def _clip(knob: KnobSpec, value: float) -> float:
    v = min(value, knob.bound if knob.bound is not None else value)
    return v if knob.name in FLOAT_KNOBS else float(int(v))


def _target(w: Mapping[str, Any], now: float) -> float:
    """The value the what-if proposes, from the tune's own value: the what-if's step is from
    the engine's reading of today's value, the tune's is what it launched with."""
    proposed = float(w["proposed"])
    if w.get("current") and float(w["current"]) != now:
        return now * proposed / float(w["current"])
    return proposed


def _also(
    chain: Sequence[Mapping[str, Any]],
    knobs: Sequence[KnobSpec],
    current: Mapping[str, float],
    first: str,
) -> tuple[list[dict[str, Any]], float]:
    """The what-if's change after the first, where its knob is given and it is not clipped:
    made in the same relaunch (the first alone stops just past the next limit, which then
    binds); and the gain over the first's that it is predicted to add."""
    if len(chain) < 2:
        return [], 1.0
    w = chain[1]
    knob = next((x for x in knobs if WHATIF_KNOB[x.name] == w.get("knob")), None)
    if knob is None or knob.name == first or knob.name not in current:
        return [], 1.0
    now = current[knob.name]
    target = _target(w, now)
    to = _clip(knob, target)
    gain = float((w.get("predicted") or {}).get("gain") or 0.0)
    if to < target or to <= now or gain < MIN_GAIN:
        return [], 1.0
    change = {"knob": knob.name, "current": _value(knob, now),
              "proposed": _value(knob, float(w["proposed"])), "to": _value(knob, to),
              "limit": (w.get("predicted") or {}).get("limit")}  # fmt: skip
    return [change], gain


def decide(
    sweep: Mapping[str, Any],
    run: Mapping[str, Any],
    knobs: Sequence[KnobSpec],
    current: Mapping[str, float],
    before: Mapping[str, Any] | None = None,
) -> Decision:
    """The knob the knee's cause names, moved as the what-if at the knee says (within its
    bound), with the what-if's next change where its knob is given too; or why the tune
    stops here. ``before``: the run before this one (its decision led here).

    Where the load generator set the knee (client-limited), the engine's own what-if at the
    knee names the knob, and the measurement decides: a change made that way that gained
    under MIN_GAIN, measured, while the load generator set the knee again, ends the tune."""
    cause = run.get("cause")
    if run.get("slo_pass") is False:
        return Decision(stop="the SLO binds: no step met it")
    g, k = run.get("goodput_concurrency"), run.get("saturation_concurrency")
    if run.get("slo_pass") and g is not None and k is not None and g < k:
        return Decision(stop=f"the SLO binds before the knee (met up to {g:g}, knee at {k:g})")
    if not run.get("saturated"):
        return Decision(stop="the sweep found no knee (raise --max-concurrency)")
    note = None
    if cause == "client-limited":
        spent = _blind_spent(run, before)
        if spent is not None:
            return Decision(stop=f"the load generator set the knee again, and {spent}")
        named = _knobs_at_knee(sweep, k, knobs)
        if not named:
            return Decision(stop="the load generator was the limit at the knee (client-limited), "
                            "and the engine's what-if there names no knob given")  # fmt: skip
        note = ("the load generator set the knee (client-limited): the engine's what-if there "
                "chose this change; the next run measures it")  # fmt: skip
    else:
        named = [x for x in knobs if CAUSE_OF[WHATIF_KNOB[x.name]] == cause]
        if not named and cause in GPU_CAUSES:
            # The GPU busy at a knee where a cap holds the requests (running at the cap, the
            # rest waiting): the sweep names the GPU, while the engine's what-if there has a
            # cap binding before the GPU's knee and a change for it (it proposes none where
            # the GPU binds first). Followed, and measured: one that gained under MIN_GAIN
            # ends the tune.
            spent = _blind_spent(run, before)
            if spent is not None:
                return Decision(stop=f"the sweep named {cause} again, and {spent}")
            named = _knobs_at_knee(sweep, k, knobs)
            if named:
                note = (f"the sweep named {cause} at the knee, the engine's what-if there a "
                        "cap before the GPU's knee: it chose this change; the next run "
                        "measures it")  # fmt: skip
            else:
                fitted = _past_the_gpu_knee(sweep, run, knobs, current, cause)
                if fitted is not None:
                    return fitted
    if not named:
        given = ", ".join(x.name for x in knobs)
        return Decision(
            stop=f"the cause, {cause or 'unknown'}, has no knob among those given ({given})"
        )
    # Where two caps bind together the sweep may name one and the engine's what-if at the
    # knee the other (the kv-cap box at 640 blocks and 64 sequences): the what-if's knob is
    # tried after the cause's.
    after = [x for x in _knobs_at_knee(sweep, k, knobs) if x not in named]
    reasons = []
    for knob in [*named, *after]:
        if knob in after:
            note = (f"the what-if at the knee names {knob.name}, the cause ({cause}) a knob "
                    "it has no change for; the next run measures it")  # fmt: skip
        if knob.bound is not None and current[knob.name] >= knob.bound:
            reasons.append(f"{knob.name} is at its bound {knob.bound:g}")
            continue
        found = _whatif_for(sweep, k, knob, knobs)
        if found is None:
            reasons.append(f"no what-if for {knob.name} at the knee")
            continue
        chain, at, knob = found
        now = current[knob.name]
        w = chain[0]
        p = w.get("predicted") or {}
        gain = float(p.get("gain") or 0.0)
        target = _target(w, now)
        to = _clip(knob, target)
        if to <= now:
            bound = f"its bound {knob.bound:g}" if knob.bound is not None else "the value proposed"
            reasons.append(f"{knob.name} is at {bound}")
            continue
        also: list[dict[str, Any]] = []
        if to < target and target > now:
            # Clipped: the gain grows with the knob up to the limit it proposed to reach.
            gain = 1.0 + (gain - 1.0) * (to - now) / (target - now)
        else:
            also, more = _also(chain, knobs, current, knob.name)
            gain *= more
        stretch = None
        measured = _step_growth(sweep, k) if k is not None else None
        if also and measured is not None:
            to, also, r = _stretch(knob, now, to, also, knobs, _knee_limits(sweep, k))
            if r > 1.0:
                stretch = round(r, 3)
                gain *= r if _steps_assumed_flat(w) else r ** (1.0 - measured[0])
        growth = None
        fit = measured if _steps_assumed_flat(w) else None
        if fit is not None:
            # The what-if read no GPU (vLLM's CPU build): it assumes steps that do not
            # lengthen with the batch, so its gain is the sequences' own factor. A CPU
            # engine's steps do lengthen: the gain at the step's growth measured over the
            # sweep's own steps up to the knee (running ** e: the factor ** (1 - e)).
            gain = gain ** (1.0 - fit[0])
            growth = {"exponent": round(fit[0], 3), "steps": [fit[1], fit[2]]}
        if gain < MIN_GAIN:
            reasons.append(
                f"{knob.name} {now:g} -> {to:g} is predicted to gain {gain:.2f}x (< {MIN_GAIN}x)"
                + (f", a step growing as running ** {fit[0]:.2f}" if fit is not None else "")
            )
            continue
        base = run.get("throughput_tok_s") or 0.0
        return Decision(
            step_growth=growth,
            stretch=stretch,
            knob=knob.name,
            current=_value(knob, now),
            proposed=_value(knob, float(w["proposed"])),
            to=_value(knob, to),
            gain=round(gain, 3),
            predicted_tok_s=round(base * gain, 1),
            whatif=dict(w),
            step_concurrency=at,
            also=also or None,
            note=note,
        )
    return Decision(stop="; ".join(dict.fromkeys(reasons)))


def prediction_row(prev: Mapping[str, Any], run: Mapping[str, Any]) -> dict[str, Any] | None:
    """A change's prediction beside what the run it led to measured."""
    d = prev.get("decision") or {}
    if d.get("knob") is None or run.get("status") != "ok":
        return None
    measured = run.get("throughput_tok_s")
    predicted = d.get("predicted_tok_s")
    also = d.get("also") or []
    limit = ((d.get("whatif") or {}).get("predicted") or {}).get("limit")
    row = {
        "run": prev["index"],
        "measured_run": run["index"],
        "knob": d["knob"],
        "from": d["current"],
        "to": d["to"],
        "predicted_tok_s": predicted,
        "measured_tok_s": measured,
        "ratio": round(predicted / measured, 3) if predicted and measured else None,
        "predicted_next_limit": also[-1].get("limit") if also else limit,
        "measured_cause": run.get("cause"),
    }
    if also:
        # The what-if's next change, made in the same relaunch.
        row["also"] = [{k: c[k] for k in ("knob", "current", "to")} for c in also]
    return row
