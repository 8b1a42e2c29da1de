"""diagnose(): one window in, every verdict that holds out, the primary cause first.

The order answers "why is my GPU under-used?": a client that cannot drive the
load invalidates the rest; then whatever stops work reaching the GPU (the
scheduler's caps, launch overhead, CPU in the path, too little load); last the
healthy saturations, which say the GPU itself is the limit. Weak verdicts
(below ``Thresholds.weak_confidence``, typically for want of a source) sort
after every confident one.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from monitor.diagnosis import figures as fig
from monitor.diagnosis.client_rules import client_limited
from monitor.diagnosis.comm_rules import busy_gpus, comm_bound
from monitor.diagnosis.coverage import can_judge, unjudged
from monitor.diagnosis.cpu_rules import cpu_bound_box, cpu_bound_engine
from monitor.diagnosis.gpu_rules import launch_bound, saturated, transfer_bound
from monitor.diagnosis.idle_rules import box_idle, engine_idle, gpu_idle, idle_gpus
from monitor.diagnosis.rule_kit import BOX, Context, engine_table, ev, make_verdict
from monitor.diagnosis.scheduler_rules import kv_cap, seq_cap, starved, token_cap
from monitor.diagnosis.sharing_rules import contended, with_sharing_evidence
from monitor.diagnosis.step_cost import StepCost
from monitor.diagnosis.thresholds import Caps, Thresholds
from monitor.diagnosis.verdict import Verdict
from monitor.diagnosis.whatif import engine_whatif, with_whatif
from monitor.profiling.handoff import gpu_next_steps
from monitor.window.scopes import engine_scope, gpu_scope
from monitor.window.stats import WindowStats


@dataclass(frozen=True)
class Diagnosis:
    verdicts: tuple[Verdict, ...]
    # Scope ("engine:...", "box") -> JSON-able figures: Little's law, caps, busy fraction, roofline.
    analyses: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    @property
    def top(self) -> Verdict | None:
        return self.verdicts[0] if self.verdicts else None


_RANK = {
    "client-limited": 0,
    "idle": 1,
    "kv-cap": 2,
    "seq-cap": 3,
    "token-cap": 4,
    "launch-bound": 5,
    "small-kernels": 5,
    "transfer-bound": 5,
    "contended": 5,
    "cpu-bound": 6,
    "starved": 7,
    "comm-bound": 8,
    "memory-bound": 8,
    "compute-bound": 8,
    "unknown": 10,
}


def rank(v: Verdict) -> int:
    if v.cause == "idle" and v.scope != BOX:
        return 9  # one idle GPU or engine in a box that has work is a side note
    return _RANK.get(v.cause, 10)


_MOVE = re.compile(r"\b(raise|lower)\s+(--[a-z0-9-]+)")


def _moves(text: str) -> dict[str, str]:
    return {knob: way for way, knob in _MOVE.findall(text)}


# Leads under which more load is no first fix: the engine's CPU gap grows with it.
_LOAD_WAITS_FOR = ("cpu-bound",)


def defer_to_lead(verdicts: Sequence[Verdict]) -> tuple[Verdict, ...]:
    """Shown together, the lead speaks first and the others agree with it.

    Fixes must not pull one setting two ways: the leading verdict's fix wins, and a clause of
    another fix that moves the same flag the other way gives way (kv-cap's "lower
    --max-num-seqs" beside memory-bound's "raise --max-num-seqs"); starved's "send more
    load" waits for a lead it would make worse. Verdicts are ordered by cause, not by
    confidence (the module's docstring says why), so one shown under the lead is read given
    the lead: its confidence is shown at most the lead's, its own kept as confidence_alone."""
    if len(verdicts) < 2:
        return tuple(verdicts)
    lead = verdicts[0]
    wants = _moves(lead.fix)
    out = [lead]
    for v in verdicts[1:]:
        if v.confidence > lead.confidence:
            v = dataclasses.replace(v, confidence=lead.confidence, confidence_alone=v.confidence)
        if v.cause == "starved" and lead.cause in _LOAD_WAITS_FOR:
            v = dataclasses.replace(v, fix=f"after the {lead.cause} fix: {v.fix}")
        clauses = v.fix.split("; ")
        kept = [
            c for c in clauses if not any(wants.get(k, way) != way for k, way in _moves(c).items())
        ]
        if len(kept) < len(clauses):
            knobs = ", ".join(sorted(k for k in _moves(v.fix) if k in wants))
            kept.append(f"{knobs}: follow the {lead.cause} fix first")
            v = dataclasses.replace(v, fix="; ".join(kept))
        out.append(v)
    return tuple(out)


def order(verdicts: list[Verdict], th: Thresholds) -> tuple[Verdict, ...]:
    return tuple(
        sorted(
            verdicts,
            key=lambda v: (v.confidence < th.weak_confidence, rank(v), -v.confidence, v.scope),
        )
    )


def _engine_verdicts(ctx: Context) -> list[Verdict]:
    out: list[Verdict] = []
    for e in ctx.window.engines:
        if engine_idle(e, ctx.th):
            gpus_idle = all(gpu_idle(g, ctx.th) for g in ctx.gpus if g.util is not None)
            if gpus_idle:
                continue  # the box verdict (or none, if another engine works) covers it
            out.append(
                make_verdict(
                    "idle",
                    0.7,
                    engine_scope(e),
                    [ev("running_max", e.running_max, 0.5, "<")],
                    "none for this engine; if it should have work, check the router in front",
                    "This engine has no requests.",
                )
            )
            continue
        # A rule whose inputs the page lacks is not run: absent is not 0 (coverage.py).
        token = token_cap(ctx, e) if can_judge(e, "token-cap") else None
        found = [
            kv_cap(ctx, e) if can_judge(e, "kv-cap") else None,
            seq_cap(ctx, e, token_pinned=token is not None) if can_judge(e, "seq-cap") else None,
            token,
            starved(ctx, e) if can_judge(e, "starved") else None,
            cpu_bound_engine(ctx, e),
        ]
        out += [v for v in found if v is not None]
    return out


def _fallback(ctx: Context) -> Verdict:
    w = ctx.window
    if not w.engines and not ctx.has_gpu:
        errs = "; ".join(f"{e.source}: {e.message}" for e in w.errors[:3])
        return make_verdict(
            "unknown",
            0.0,
            BOX,
            [],
            "check that the sources can be read (NVML or --dcgm-exporter, --vllm URL)",
            "No data: no GPU or engine source produced readings" + (f" ({errs})." if errs else "."),
            ("gpu", "engine"),
        )
    evidence = ctx.gpu_evidence() if ctx.has_gpu else []
    for e in w.engines:
        evidence += [
            ev("running_mean", e.running_mean),
            ev("waiting_mean", e.waiting_mean),
        ]
    if not ctx.has_gpu:
        return make_verdict(
            "unknown",
            0.3,
            BOX,
            evidence,
            "add a GPU source (NVML on this host, or --dcgm-exporter URL) to judge the GPU side",
            "No cause from the engine alone; without GPU data, saturation, launch overhead and "
            "CPU in the path cannot be judged.",
            ("gpu",),
        )
    missing = () if w.engines else ("engine",)
    return make_verdict(
        "unknown",
        0.3,
        BOX,
        evidence,
        "give max_num_seqs / max_num_batched_tokens, add the engine's /metrics, or watch longer",
        "No single cause stands out in this window.",
        missing,
    )


def _box_analysis(ctx: Context) -> dict[str, Any]:
    w = ctx.window
    host = w.host
    load = dict(w.load)
    engine_in_flight = None
    if w.engines and all(e.in_flight_mean is not None for e in w.engines):
        engine_in_flight = sum(e.in_flight_mean or 0.0 for e in w.engines)
    client_in_flight = load.get("client_in_flight")
    agree = None
    if client_in_flight is not None and engine_in_flight is not None:
        scale = max(client_in_flight, engine_in_flight)
        agree = (
            scale == 0
            or abs(client_in_flight - engine_in_flight) <= ctx.th.littles_tolerance * scale
        )
    missing = []
    if not ctx.has_gpu:
        missing.append("gpu")
    if not w.engines:
        missing.append("engine")
    if host is None:
        missing.append("host")

    def r(v: float | None) -> float | None:
        return None if v is None else round(v, 4)

    return {
        "busy_fraction": r(fig.busy_fraction(w.gpus)),
        "gpu_util_mean": r(fig.util_mean(w.gpus)),
        "gpu_sm_active_mean": r(fig.sm_active_mean(w.gpus)),
        "gpus_saturated": fig.gpus_saturated(w.gpus, ctx.th),
        "host_cpu_busy_ratio": r(host.cpu_busy_ratio) if host is not None else None,
        "engine_thread_cpu_ratio": r(fig.engine_thread_ratio(host)),
        "engine_in_flight": r(engine_in_flight),
        "client_in_flight": r(client_in_flight),
        # False: something between client and engine (a gateway, the client) holds requests.
        "client_engine_in_flight_ok": agree,
        "missing": missing,
    }


DEFAULT_THRESHOLDS = Thresholds()
NO_CAPS = Caps()


def diagnose(
    window: WindowStats,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
    caps: Caps = NO_CAPS,
    seen_caps: Mapping[str, fig.SeenCap] | None = None,
    reconcile: bool = True,
    gpu_hour_price: float | None = None,
    step_costs: Mapping[str, StepCost] | None = None,
) -> Diagnosis:
    """Every verdict that holds in this window, most important first. Pure: no I/O, no state
    (caps inferred in earlier windows come in as ``seen_caps``, each engine's step cost
    fitted to them as ``step_costs``)."""
    seen = dict(seen_caps or {})
    ctx = Context(
        window, thresholds, caps, seen, dict(step_costs or {}), gpu_hour_price=gpu_hour_price
    )
    verdicts: list[Verdict] = []
    idle = box_idle(ctx)
    if idle is not None:
        verdicts.append(idle)
    else:
        verdicts += _engine_verdicts(ctx)
        box_cpu = cpu_bound_box(ctx)
        if box_cpu is not None:
            verdicts.append(box_cpu)
        comm = comm_bound(ctx)
        # The ranks' low SM share is the collectives' doing: launch-bound or memory-bound
        # on those GPUs would name a symptom of comm-bound, so comm-bound speaks for them.
        waiting_on_links = set() if comm is None else {gpu_scope(g) for g in busy_gpus(ctx)}
        if comm is not None:
            verdicts.append(comm)
        # A GPU split into MIG instances is judged per instance: the whole GPU's figures
        # mix the instances' work.
        split = {g.mig_parent for g in window.gpus if g.mig_parent is not None}
        for g in window.gpus:
            if gpu_scope(g) in waiting_on_links or (g.mig_parent is None and g.index in split):
                continue
            for check in (contended, transfer_bound, launch_bound, saturated):
                v = check(ctx, g)
                if v is not None:
                    verdicts.append(v)
        verdicts += idle_gpus(ctx)
    client = client_limited(ctx)
    if client is not None:
        verdicts.append(client)
    if not verdicts:
        verdicts.append(_fallback(ctx))
    analyses: dict[str, Mapping[str, Any]] = {
        engine_scope(e): {
            **fig.engine_analysis(
                e,
                window.gpus,
                window.host,
                caps,
                thresholds,
                (ctx.littles(e), ctx.seq_cap(e), ctx.token_budget(e)),
                ctx.headroom(e),
                ctx.cap_fill(e),
            ),  # fmt: skip
            # The engine verdicts this page cannot support, and why.
            "unjudged": unjudged(e),
            # What changing the knob of the leading limit (and the next) would buy: from the
            # one Load the headroom figure reads.
            "whatif": engine_whatif(
                ctx.load(e),
                e,
                window.gpus,
                ctx.seq_cap(e),
                ctx.token_budget(e),
                engine_table(e).seq_cap_setting,
            ),  # fmt: skip
        }
        for e in window.engines
    }
    analyses["box"] = _box_analysis(ctx)
    verdicts = [_hand_off(ctx, v) for v in with_sharing_evidence(ctx, verdicts)]
    verdicts = with_whatif(verdicts, analyses)
    ordered = order(verdicts, thresholds)
    return Diagnosis(defer_to_lead(ordered) if reconcile else ordered, analyses)


# The causes a GPU's kernels show, where a kernel profiler says which kernels.
_KERNEL_CAUSES = (
    "launch-bound", "small-kernels", "transfer-bound", "compute-bound", "memory-bound", "comm-bound",
)  # fmt: skip


def _hand_off(ctx: Context, v: Verdict) -> Verdict:
    """A GPU verdict names the resource; add the command that shows which kernels use it."""
    if v.cause not in _KERNEL_CAUSES:
        return v
    host = ctx.window.host
    pid = None
    if host is not None:
        pid = host.busiest_thread.pid if host.busiest_thread is not None else None
        if pid is None and host.pids:
            pid = host.pids[0]
    url = None
    if ctx.window.engines:
        url = ctx.window.engines[0].url.removesuffix("/metrics")
    return dataclasses.replace(v, next=gpu_next_steps(v.cause, pid, url))
