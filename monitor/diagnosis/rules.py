"""One check per cause: a window in, zero or more verdicts out, each with its evidence.

Confidences are fixed per rule and lowered, with the source named in
``missing``, when the data that would confirm the verdict was not read. They
order verdicts; they are not calibrated probabilities.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from monitor.diagnosis import figures as fig
from monitor.diagnosis.thresholds import Caps, Thresholds
from monitor.diagnosis.verdict import Cause, Evidence, Verdict
from monitor.report import engine_scope, gpu_scope
from monitor.window import EngineWindow, GpuWindow, WindowStats

BOX = "box"


def num(x: float) -> str:
    """A number as a person would say it: 6.4, 25.6, 128, 0.64."""
    if abs(x) >= 100:
        return f"{x:.0f}"
    return f"{x:.3g}"


def pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def _pct_read(x: float | None) -> str:
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


# -- Idle ----------------------------------------------------------------------


def engine_idle(e: EngineWindow, th: Thresholds) -> bool:
    if e.running_max is None:
        return False
    return (
        e.running_max < 0.5
        and (e.waiting_max or 0.0) < 0.5
        and (e.requests_per_s is None or e.requests_per_s < th.idle_requests_per_s)
    )


def gpu_idle(g: GpuWindow, th: Thresholds) -> bool:
    return g.util is not None and g.util < th.util_idle


def box_idle(ctx: Context) -> Verdict | None:
    """Everything read is idle: no requests and no kernels."""
    w, th = ctx.window, ctx.th
    if not w.engines and not ctx.has_gpu:
        return None
    if not all(engine_idle(e, th) for e in w.engines):
        return None
    if not all(gpu_idle(g, th) for g in w.gpus if g.util is not None):
        return None
    evidence: list[Evidence] = []
    for e in w.engines:
        evidence += [
            ev("running_max", e.running_max, 0.5, "<"),
            ev("waiting_max", e.waiting_max, 0.5, "<"),
            ev("requests_per_s", e.requests_per_s, th.idle_requests_per_s, "<", "req/s"),
        ]
    for g in w.gpus:
        evidence.append(ev(f"gpu{g.index}_util", g.util, th.util_idle, "<", "ratio"))
    missing: list[str] = []
    conf = 0.95
    if not ctx.has_gpu:
        missing.append("gpu")
        conf = 0.8
    if not w.engines:
        missing.append("engine")
        conf = 0.85
    what = "no requests and no GPU activity"
    if missing:
        what = (
            "no requests (no GPU data)" if "gpu" in missing else "no GPU activity (no engine data)"
        )
    return make_verdict(
        "idle", conf, BOX, evidence, "none: nothing to serve", f"Idle: {what}.", missing
    )


def idle_gpus(ctx: Context) -> list[Verdict]:
    """A GPU with nothing running while the rest of the box works."""
    out = []
    busy_elsewhere = any(not gpu_idle(g, ctx.th) for g in ctx.gpus if g.util is not None) or any(
        not engine_idle(e, ctx.th) for e in ctx.window.engines
    )
    if not busy_elsewhere:
        return out
    for g in ctx.gpus:
        if gpu_idle(g, ctx.th):
            out.append(
                make_verdict(
                    "idle",
                    0.7,
                    gpu_scope(g),
                    [ev("util", g.util, ctx.th.util_idle, "<", "ratio")],
                    f"check that the engine uses GPU {g.index} (CUDA_VISIBLE_DEVICES, "
                    "--tensor-parallel-size, --data-parallel-size)",
                    f"GPU {g.index} is idle ({pct(g.util or 0)} duty cycle) while the box has work.",
                )
            )
    return out


# -- Engine scheduler caps -----------------------------------------------------


def starved(ctx: Context, e: EngineWindow) -> Verdict | None:
    th = ctx.th
    if engine_idle(e, th) or e.running_mean is None or fig.queue_sustained(e, th):
        return None
    cap = fig.seq_cap(e, ctx.caps, th)
    assert cap.value is not None  # seq_cap always yields a number (given, inferred or assumed)
    limit = th.starved_running_share * cap.value
    if e.running_mean > limit:
        return None
    activity = fig.gpu_activity(ctx.gpus)
    compute_sat = fig.compute_saturated(ctx.gpus, th)
    if compute_sat:
        return None  # tensor cores already busy: more load would only add latency
    missing: list[str] = []
    conf = 0.85
    if activity is None:
        missing.append("gpu")
        conf -= 0.15
    elif compute_sat is None and fig.gpus_saturated(ctx.gpus, th):
        conf -= 0.1  # busy, and no tensor metric to say whether it is compute or memory
    if cap.assumed:
        conf -= 0.1
    lit = fig.littles(e, th)
    fill = cap.value / lit.slot_latency_s if lit.slot_latency_s else None
    evidence = [
        ev("waiting_mean", e.waiting_mean, th.waiting_min, "<="),
        ev("running_mean", e.running_mean, limit, "<="),
        ev("seq_cap", cap.value),
    ]
    if activity is not None:
        tensor = fig.tensor_active_mean(ctx.gpus)
        evidence.append(ev("gpu_activity", activity, unit="ratio"))
        evidence.append(ev("tensor_active", tensor, th.tensor_high, "<", "ratio"))
    evidence += [
        ev("littles_in_flight", lit.in_flight),
        ev("littles_throughput_rps", lit.throughput_rps, unit="req/s"),
        ev("slot_latency_s", lit.slot_latency_s, unit="s"),
        ev("fill_rate_rps", fill, unit="req/s"),
    ]
    now = []
    if lit.throughput_rps is not None:
        now.append(f"now {num(lit.throughput_rps)} req/s")
    if lit.in_flight is not None:
        now.append(f"{num(lit.in_flight)} in flight")
    if lit.slot_latency_s is not None:
        now.append(f"requests last {num(lit.slot_latency_s)} s")
    if cap.assumed:
        now.append(f"cap assumed: vLLM's usual default of {cap.value}; give max_num_seqs")
    now_text = f" ({', '.join(now)})" if now else ""
    if fill is not None:
        fix = (
            f"send about {num(fill)} req/s to fill {cap.value} slots{now_text}; "
            "check any gateway's concurrency limit"
        )
    else:
        fix = (
            f"send more load: about {cap.value} requests in flight would fill the slots"
            f"{now_text}; check any gateway's concurrency limit"
        )
    gpu_text = "" if activity is None else f", GPU {pct(activity)} active"
    summary = (
        f"Starved: {num(e.running_mean)} of {cap.value} slots busy and nothing waits{gpu_text}"
        f"{' (no GPU data)' if activity is None else ''}."
    )
    return make_verdict("starved", conf, engine_scope(e), evidence, fix, summary, missing)


def kv_cap(ctx: Context, e: EngineWindow) -> Verdict | None:
    th = ctx.th
    queued = fig.queue_sustained(e, th)
    kv = e.kv_cache_usage_mean
    full = kv is not None and kv >= th.kv_full
    preempting = e.preemptions_per_s is not None and e.preemptions_per_s > th.preemptions_per_s_min
    if not ((full and queued) or preempting):
        return None
    conf = 0.9 if full and preempting else 0.8
    evidence = [
        ev("kv_cache_usage_mean", kv, th.kv_full, ">="),
        ev("preemptions_per_s", e.preemptions_per_s, th.preemptions_per_s_min, ">", "1/s"),
        ev("waiting_mean", e.waiting_mean, th.waiting_min, ">"),
        ev("running_mean", e.running_mean),
    ]
    parts = []
    if kv is not None:
        parts.append(f"KV cache {pct(kv)} used")
    if preempting:
        parts.append(f"{num(e.preemptions_per_s or 0)} preemptions/s")
    if e.waiting_mean:
        parts.append(f"{num(e.waiting_mean)} waiting")
    fix = (
        "give the KV cache more room: raise --gpu-memory-utilization, use --kv-cache-dtype fp8 "
        "or lower --max-model-len"
    )
    if e.running_mean:
        fix += f"; or lower --max-num-seqs below {num(e.running_mean)} to stop preemptions"
    summary = f"KV-cache cap: {', '.join(parts)}."
    return make_verdict("kv-cap", conf, engine_scope(e), evidence, fix, summary)


def seq_cap(ctx: Context, e: EngineWindow, token_pinned: bool) -> Verdict | None:
    th = ctx.th
    if not fig.queue_sustained(e, th):
        return None
    cap = fig.seq_cap(e, ctx.caps, th)
    if cap.assumed or cap.value is None or cap.at_cap_share is None:
        return None
    if cap.at_cap_share < th.plateau_share:
        return None
    kv = e.kv_cache_usage_mean
    if kv is not None and kv >= th.kv_full:
        return None
    if e.preemptions_per_s is not None and e.preemptions_per_s > th.preemptions_per_s_min:
        return None
    conf = 0.9 if not cap.inferred else 0.8
    missing: list[str] = []
    compute_sat = fig.compute_saturated(ctx.gpus, th)
    notes = []
    if not ctx.has_gpu:
        missing.append("gpu")
        conf -= 0.1
        notes.append("no GPU data: cannot confirm the GPU has room")
    elif compute_sat is None and fig.gpus_saturated(ctx.gpus, th):
        conf -= 0.1
        notes.append("the GPU is busy and its tensor activity is unknown")
    elif compute_sat:
        conf = 0.4
        notes.append(
            "but the GPU's tensor cores are saturated too: a higher cap mostly adds latency"
        )
    if cap.inferred and token_pinned:
        conf = min(conf, 0.45)
        notes.append("engine steps also fill the token budget: the plateau may come from it")
    if e.waiting_capacity_mean:
        conf += 0.05
    evidence = [
        ev("waiting_mean", e.waiting_mean, th.waiting_min, ">"),
        ev("waiting_share", fig.waiting_share(e), th.waiting_sustained, ">="),
        ev("running_at_cap_share", cap.at_cap_share, th.plateau_share, ">="),
        ev("seq_cap", cap.value),
        ev("kv_cache_usage_mean", kv, th.kv_full, "<"),
    ]
    if e.waiting_capacity_mean is not None:
        evidence.append(ev("waiting_capacity_mean", e.waiting_capacity_mean))
    evidence += ctx.gpu_evidence() if ctx.has_gpu else []
    how = "inferred from the plateau of running while requests wait" if cap.inferred else "given"
    waiting = num(e.waiting_mean or 0)
    kv_text = f"; KV cache {pct(kv)} used" if kv is not None else ""
    fix = (
        f"raise --max-num-seqs above {cap.value} (running sits at {cap.value} while "
        f"{waiting} wait{kv_text})"
    )
    summary = (
        f"Sequence cap: running sits at {cap.value} ({how}) while {waiting} requests wait"
        f"{'; ' + '; '.join(notes) if notes else ''}."
    )
    return make_verdict("seq-cap", conf, engine_scope(e), evidence, fix, summary, missing)


def token_cap(ctx: Context, e: EngineWindow) -> Verdict | None:
    th = ctx.th
    budget = fig.token_budget(e, ctx.caps, th)
    if budget.value is None or budget.pinned_share is None:
        return None
    if budget.pinned_share < th.token_pinned_share:
        return None
    prefill_heavy = (
        budget.prefill_share is not None and budget.prefill_share >= th.prefill_share_min
    )
    if budget.inferred and not prefill_heavy:
        return None  # decode steps pinned at R tokens are the sequence cap's doing, not a budget
    conf = 0.85 if not budget.inferred else 0.6
    if not prefill_heavy:
        conf -= 0.15
    saturated_note = ""
    if fig.compute_saturated(ctx.gpus, th):
        # Full steps on busy tensor cores: a bigger budget would not make them faster.
        conf = min(conf, 0.4)
        saturated_note = "; the tensor cores are saturated, so a bigger budget adds little"
    evidence = [
        ev("token_pinned_share", budget.pinned_share, th.token_pinned_share, ">="),
        ev("token_budget", budget.value),
        ev("prefill_share", budget.prefill_share, th.prefill_share_min, ">="),
        ev("iteration_tokens_mean", e.iteration_tokens_mean, unit="tokens"),
        ev("waiting_mean", e.waiting_mean),
    ]
    how = "inferred from the iteration-tokens histogram" if budget.inferred else "given"
    fix = (
        f"raise --max-num-batched-tokens above {budget.value} ({pct(budget.pinned_share)} of "
        "engine steps fill it)"
    )
    if prefill_heavy:
        fix += f"; prompts are {pct(budget.prefill_share or 0)} of tokens"
    summary = (
        f"Token budget: {pct(budget.pinned_share)} of engine steps are at the budget of "
        f"{budget.value} tokens ({how}){saturated_note}."
    )
    return make_verdict("token-cap", conf, engine_scope(e), evidence, fix, summary)


# -- CPU in the path -----------------------------------------------------------


def _cpu_fix(busy: float | None, thread: float | None, gap_ms: float | None) -> str:
    fix = (
        "overlap scheduling with GPU steps (vLLM --async-scheduling), move detokenising and "
        "streaming off the engine loop, sample on the GPU, or give the engine a faster core"
    )
    if busy is not None and busy > 0:
        gain = 1.0 / busy
        gap = f" ({num(gap_ms)} ms of CPU per step)" if gap_ms is not None else ""
        fix += f": without the CPU gap{gap} steps could run up to {gain:.1f}x as often"
    return fix


def cpu_bound_engine(ctx: Context, e: EngineWindow) -> Verdict | None:
    """CPU in the path, read three ways.

    With host data: the engine thread pinned at a core (CPU work longer than the GPU's,
    overlapped or not), or thread and GPU taking turns (serial: the thread's share plus
    the GPU's busy share fill the step, the thread taking at least ``cpu_step_share``),
    or the whole host saturated. Without it (or with a thread that does not show it):
    requests ran in every sample, so the engine stepped back to back, yet the GPU's duty
    cycle stayed under ``util_low``: something on the host sits between the steps.
    """
    th = ctx.th
    host = ctx.window.host
    if engine_idle(e, th) or e.running_mean is None:
        return None
    busy = fig.busy_fraction(ctx.gpus)
    if busy is not None and busy >= th.util_saturated:
        return None
    working = (e.running_min is not None and e.running_min >= 1) or fig.queue_sustained(e, th)
    if e.running_mean < 1 and not working:
        return None
    thread = fig.engine_thread_ratio(host)
    host_busy = host.cpu_busy_ratio if host is not None else None
    thread_hot = thread is not None and thread >= th.engine_thread_busy
    serial = (
        not thread_hot
        and thread is not None
        and busy is not None
        and thread >= th.cpu_step_share
        and thread + busy >= th.engine_thread_busy
    )
    host_hot = host_busy is not None and host_busy >= th.host_cpu_saturated
    gaps = working and busy is not None and busy < th.util_low
    if not (thread_hot or serial or host_hot or gaps):
        return None
    # Show the threshold only beside the figure that crossed it; the rest is context.
    evidence: list[Evidence] = []
    if busy is not None:
        evidence.append(
            ev("busy_fraction", busy, th.util_low, "<", "ratio")
            if gaps and not (thread_hot or serial or host_hot)
            else ev("busy_fraction", busy, th.util_saturated, "<", "ratio")
        )
    if thread_hot:
        evidence.append(ev("engine_thread_cpu_ratio", thread, th.engine_thread_busy, ">=", "cores"))
    elif serial:
        evidence += [
            ev("engine_thread_cpu_ratio", thread, th.cpu_step_share, ">=", "cores"),
            ev("thread_plus_gpu_busy", (thread or 0) + (busy or 0), th.engine_thread_busy, ">="),
        ]
    elif host is not None:
        evidence.append(ev("engine_thread_cpu_ratio", thread, unit="cores"))
    if host is not None:
        evidence.append(
            ev("host_cpu_busy_ratio", host_busy, th.host_cpu_saturated, ">=", "ratio")
            if host_hot
            else ev("host_cpu_busy_ratio", host_busy, unit="ratio")
        )
    evidence += [
        ev("running_min", e.running_min, 1, ">=") if gaps else ev("running_mean", e.running_mean),
        ev("waiting_mean", e.waiting_mean),
    ]
    steps = fig.steps_per_s(e)
    gap_ms = None
    if busy is not None and steps:
        gap_ms = 1000.0 * (1.0 - min(busy, 1.0)) / steps
        evidence.append(ev("steps_per_s", steps, unit="1/s"))
        evidence.append(ev("host_gap_ms_per_step", gap_ms, unit="ms"))
    name = host.busiest_thread.name if host is not None and host.busiest_thread else "?"
    scope = engine_scope(e)
    if busy is None:
        who = (
            f"the engine's busiest thread ({name}) uses {pct(thread or 0)} of a core"
            if thread_hot or serial
            else f"the host CPU is {pct(host_busy or 0)} busy"
        )
        return make_verdict(
            "cpu-bound",
            0.3,
            scope,
            evidence,
            _cpu_fix(None, thread, None),
            f"Possibly CPU in the path: {who}, but without GPU data we cannot tell whether "
            "the GPU waits on it.",
            ("gpu",),
        )
    fix = _cpu_fix(busy, thread, gap_ms)
    if thread_hot:
        who = f"the engine's busiest thread ({name}) uses {pct(thread or 0)} of a core"
        return make_verdict(
            "cpu-bound", 0.85, scope, evidence, fix,
            f"CPU in the path: the GPU is busy {pct(busy)} of the time while {who}.",
        )  # fmt: skip
    if serial:
        return make_verdict(
            "cpu-bound", 0.8, scope, evidence, fix,
            f"CPU in the path: the GPU is busy {pct(busy)} of the time and the engine's busiest "
            f"thread ({name}) {pct(thread or 0)}: they take turns, each step waits on the CPU.",
        )  # fmt: skip
    if host_hot and gaps:
        return make_verdict(
            "cpu-bound", 0.7, scope, evidence, fix,
            f"CPU in the path: the GPU is busy only {pct(busy)} of the time while requests run "
            f"and the host CPU is {pct(host_busy or 0)} busy.",
        )  # fmt: skip
    if host_hot:
        # A saturated host on its own (a shared or small box) proves nothing about the loop.
        return make_verdict(
            "cpu-bound", 0.45, scope, evidence, fix,
            f"Possibly CPU in the path: the host CPU is {pct(host_busy or 0)} busy and the GPU "
            f"{pct(busy)}, but neither the engine thread nor gaps between steps show it.",
        )  # fmt: skip
    gap_text = f" ({num(gap_ms)} ms between steps)" if gap_ms is not None else ""
    if host is None:
        return make_verdict(
            "cpu-bound", 0.6, scope, evidence, fix,
            f"CPU in the path (inferred): requests ran throughout yet the GPU was busy only "
            f"{pct(busy)} of the time{gap_text}; no host data to confirm it is the engine's CPU.",
            ("host",),
        )  # fmt: skip
    return make_verdict(
        "cpu-bound", 0.55, scope, evidence, fix,
        f"Host work in the path (inferred): requests ran throughout yet the GPU was busy only "
        f"{pct(busy)} of the time{gap_text}, though the busiest engine thread uses only "
        f"{pct(thread or 0)} of a core: look at other threads, processes or I/O in the loop.",
    )  # fmt: skip


def cpu_bound_box(ctx: Context) -> Verdict | None:
    """No engine read: a busy thread beside a GPU that idles between bursts."""
    th, host = ctx.th, ctx.window.host
    if ctx.window.engines or host is None or not ctx.has_gpu:
        return None
    thread = fig.engine_thread_ratio(host)
    busy = fig.busy_fraction(ctx.gpus)
    if thread is None or busy is None:
        return None
    if thread < th.engine_thread_busy or not (th.util_idle <= busy < th.util_saturated):
        return None
    evidence = [
        ev("busy_fraction", busy, th.util_saturated, "<", "ratio"),
        ev("busiest_thread_cpu_ratio", thread, th.engine_thread_busy, ">=", "cores"),
    ]
    name = host.busiest_thread.name if host.busiest_thread else "?"
    return make_verdict(
        "cpu-bound",
        0.7,
        BOX,
        evidence,
        _cpu_fix(busy, thread, None),
        f"CPU in the path: the GPU is busy {pct(busy)} of the time while thread {name} uses "
        f"{pct(thread)} of a core (no engine data).",
        ("engine",),
    )


# -- GPU side ------------------------------------------------------------------


def launch_gaps(g: GpuWindow, th: Thresholds) -> bool:
    """Kernels run part of the time, SMs mostly idle, and gaps between kernels remain.

    Both the eager and the CUDA-graph small step read SM active far below util; only the
    eager one leaves gaps (util 0.26 against 0.99), and only gaps say the GPU waits on
    launches. Without them, graphs or fusion of launches have nothing left to remove.
    """
    return (
        g.util is not None
        and g.sm_active is not None
        and th.launch_util_min <= g.util < th.launch_util_max
        and g.sm_active < th.launch_sm_ratio * g.util
    )


def launch_bound(ctx: Context, g: GpuWindow) -> Verdict | None:
    th = ctx.th
    if not launch_gaps(g, th):
        return None
    assert g.util is not None and g.sm_active is not None  # launch_gaps checked them
    limit = th.launch_sm_ratio * g.util
    evidence = [
        ev("util", g.util, th.launch_util_min, ">=", "ratio"),
        # The share of the time no kernel ran: what CUDA graphs would win back.
        ev("gap_share", 1.0 - g.util, round(1.0 - th.launch_util_max, 6), ">", "ratio"),
        ev("sm_active", g.sm_active, limit, "<", "ratio"),
        ev("sm_occupancy", g.sm_occupancy, unit="ratio"),
    ]
    return make_verdict(
        "launch-bound",
        0.9,
        gpu_scope(g),
        evidence,
        "capture the step in CUDA graphs (vLLM: drop --enforce-eager), torch.compile, "
        "fuse small kernels",
        f"Launch-bound: a kernel runs {pct(g.util)} of the time but SMs are active only "
        f"{g.sm_active * 100:.2g}%: tiny kernels, the GPU waits on launches.",
    )


_COMPUTE_FIX = (
    "the GPU is saturated on compute: more load only adds latency; for more throughput use "
    "lower precision (fp8), faster kernels, or more GPUs"
)
_MEMORY_FIX = (
    "bigger batches reuse the weights (raise --max-num-seqs if requests wait); quantise "
    "weights or the KV cache (fp8)"
)


def _roof_side(ctx: Context) -> tuple[str | None, list[Evidence]]:
    for e in ctx.window.engines:
        roof = fig.roofline(e, ctx.gpus, ctx.caps)
        if roof is not None and roof.get("side") is not None:
            return roof["side"], [
                ev("arithmetic_intensity", roof["arithmetic_intensity"], roof["ridge_intensity"],
                   ">=" if roof["side"] == "compute" else "<", "FLOP/B"),
                ev("mfu", roof["mfu"], unit="ratio"),
                ev("bandwidth_share", roof["bandwidth_share"], unit="ratio"),
            ]  # fmt: skip
    return None, []


def dram_dominates(g: GpuWindow, th: Thresholds) -> bool:
    """DRAM streams at a good share of peak while the tensor cores have little to do."""
    dram, tensor = g.dram_active, g.tensor_active
    if dram is None or tensor is None:
        return False  # one of the two unread: no comparison to make
    return dram >= th.dram_dominant_min and dram >= th.dram_tensor_ratio * tensor


_SMALL_KERNEL_FIX = (
    "more work per kernel: larger batches (more concurrent sequences), fused kernels"
)


def busy_unfilled(ctx: Context, g: GpuWindow) -> Verdict | None:
    """A GPU busy by duty cycle whose SMs are not saturated (util >= util_saturated,
    SM active < sm_active_high): memory-bound when DRAM dominates, else, when kernels run
    without gaps, kernels too small to fill the SMs (said as unknown: no cause fits)."""
    th = ctx.th
    assert g.util is not None and g.sm_active is not None  # saturated() checked them
    tensor, dram = g.tensor_active, g.dram_active
    base = [
        ev("util", g.util, th.util_saturated, ">=", "ratio"),
        ev("sm_active", g.sm_active, th.sm_active_high, "<", "ratio"),
    ]
    if dram_dominates(g, th):
        assert dram is not None and tensor is not None
        _, roof_ev = _roof_side(ctx)
        return make_verdict(
            "memory-bound",
            0.7,  # below the 0.9 of a saturated bus: the SMs and the bus both have some room
            gpu_scope(g),
            base
            + [
                ev("dram_active", dram, th.dram_dominant_min, ">=", "ratio"),
                ev("tensor_active", tensor, round(dram / th.dram_tensor_ratio, 6), "<=", "ratio"),
            ]
            + roof_ev,
            _MEMORY_FIX,
            f"Memory-bound: DRAM bandwidth runs at {pct(dram)} of peak while the tensor cores "
            f"are {pct(tensor)} busy (GPU busy {pct(g.util)}, SMs {pct(g.sm_active)} active): "
            "each step streams the weights for little compute, as a small-batch decode does.",
        )
    if g.util < th.launch_util_max:
        return None  # gaps remain: launch_bound() or the CPU rules speak for them
    if (tensor is not None and tensor >= th.tensor_high) or (
        dram is not None and dram >= th.dram_high
    ):
        return None  # busy tensor cores or bus with idle SMs: no single story fits
    return make_verdict(
        "unknown",
        0.5,
        gpu_scope(g),
        [
            ev("util", g.util, th.launch_util_max, ">=", "ratio"),
            ev("sm_active", g.sm_active, th.sm_active_high, "<", "ratio"),
            ev("sm_occupancy", g.sm_occupancy, unit="ratio"),
            ev("tensor_active", tensor, th.tensor_high, "<", "ratio"),
            ev("dram_active", dram, th.dram_high, "<", "ratio"),
        ],
        _SMALL_KERNEL_FIX,
        f"Small kernels: the GPU is busy all the time with kernels too small to fill its SMs "
        f"(util {pct(g.util)}, SM active {pct(g.sm_active)}); neither tensor cores "
        f"({_pct_read(tensor)}) nor DRAM ({_pct_read(dram)}) are the limit, and with no gaps "
        "between kernels, launches are not either.",
    )


def saturated(ctx: Context, g: GpuWindow) -> Verdict | None:
    th = ctx.th
    if g.util is None or g.util < th.util_saturated:
        return None
    if g.sm_active is not None and g.sm_active < th.sm_active_high:
        return busy_unfilled(ctx, g)
    base = [
        ev("util", g.util, th.util_saturated, ">=", "ratio"),
        ev("sm_active", g.sm_active, th.sm_active_high, ">=", "ratio"),
    ]
    side, roof_ev = _roof_side(ctx)
    if g.sm_active is None:
        # Duty cycle alone cannot tell a saturated GPU from one running tiny kernels.
        if side is not None:
            cause: Cause = "compute-bound" if side == "compute" else "memory-bound"
            return make_verdict(
                cause,
                0.5,
                gpu_scope(g),
                base + roof_ev,
                _COMPUTE_FIX if side == "compute" else _MEMORY_FIX,
                f"Busy {pct(g.util)} of the time; the engine's roofline puts it on the {side} "
                "side (no SM activity metrics to confirm).",
                ("gpm",),
            )
        return make_verdict(
            "unknown",
            0.4,
            gpu_scope(g),
            base,
            "enable SM activity metrics (NVML GPM on Hopper and newer, or DCGM profiling) to "
            "tell saturation from launch-bound",
            f"Busy {pct(g.util)} of the time, but without SM/tensor/DRAM activity this could be "
            "saturation or tiny kernels.",
            ("gpm",),
        )
    tensor, dram = g.tensor_active, g.dram_active
    evidence = base + [
        ev("tensor_active", tensor, th.tensor_high, ">=", "ratio"),
        ev("dram_active", dram, th.dram_high, ">=", "ratio"),
    ]
    tensor_hi = tensor is not None and tensor >= th.tensor_high
    dram_hi = dram is not None and dram >= th.dram_high
    if tensor_hi and (not dram_hi or (tensor or 0) >= (dram or 0)):
        return make_verdict(
            "compute-bound",
            0.9,
            gpu_scope(g),
            evidence + roof_ev,
            _COMPUTE_FIX,
            f"Compute-bound: SMs {pct(g.sm_active)} active, tensor cores {pct(tensor or 0)} busy.",
        )
    if dram_hi:
        return make_verdict(
            "memory-bound",
            0.9,
            gpu_scope(g),
            evidence + roof_ev,
            _MEMORY_FIX,
            f"Memory-bound: SMs {pct(g.sm_active)} active, DRAM bandwidth {pct(dram or 0)} busy.",
        )
    if side is not None:
        cause = "compute-bound" if side == "compute" else "memory-bound"
        return make_verdict(
            cause,
            0.6,
            gpu_scope(g),
            evidence + roof_ev,
            _COMPUTE_FIX if side == "compute" else _MEMORY_FIX,
            f"Saturated (SMs {pct(g.sm_active)} active); neither tensor nor DRAM activity is "
            f"high, the engine's roofline puts it on the {side} side.",
        )
    return make_verdict(
        "compute-bound",
        0.5,
        gpu_scope(g),
        evidence,
        _COMPUTE_FIX,
        f"Saturated: SMs {pct(g.sm_active)} active but neither tensor nor DRAM activity is "
        "high (non-tensor or latency-bound kernels).",
    )


# -- Client ----------------------------------------------------------------------


def client_limited(ctx: Context) -> Verdict | None:
    th = ctx.th
    load = dict(ctx.window.load)
    if not load:
        return None
    cpu = load.get("client_cpu_ratio")
    target_c, in_flight = load.get("target_concurrency"), load.get("client_in_flight")
    target_r, achieved = load.get("target_rate_rps"), load.get("achieved_rate_rps")
    reasons = []
    evidence = []
    if cpu is not None:
        evidence.append(ev("client_cpu_ratio", cpu, th.client_cpu_saturated, ">", "cores"))
        if cpu > th.client_cpu_saturated:
            reasons.append(f"the load generator uses {pct(cpu)} of a core")
    if target_c and in_flight is not None:
        need = target_c * (1 - th.client_shortfall)
        evidence.append(ev("client_in_flight", in_flight, need, "<"))
        if in_flight < need:
            reasons.append(
                f"it holds {num(in_flight)} of {num(target_c)} target concurrent requests"
            )
    if target_r and achieved is not None:
        need = target_r * (1 - th.client_shortfall)
        evidence.append(ev("achieved_rate_rps", achieved, need, "<", "req/s"))
        if achieved < need:
            reasons.append(f"it sends {num(achieved)} of {num(target_r)} target req/s")
    if not reasons:
        return None
    return make_verdict(
        "client-limited",
        0.9,
        BOX,
        evidence,
        "add load-generator processes (more Locust workers) or run the client on another machine",
        f"Client-limited: {'; '.join(reasons)}; the server is not being tested at the load asked.",
    )
