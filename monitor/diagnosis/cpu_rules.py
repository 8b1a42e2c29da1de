"""CPU in the path: the GPU waits between engine steps while host work runs."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

from monitor.diagnosis import figures as fig
from monitor.diagnosis.idle_rules import engine_idle
from monitor.diagnosis.rule_kit import BOX, Context, ev, make_verdict, num, pct
from monitor.diagnosis.verdict import Evidence, Verdict
from monitor.profiling.hot_path import describe, fix_for
from monitor.window.scopes import engine_scope
from monitor.window.stats import EngineWindow


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


def _cpu_bound_engine(ctx: Context, e: EngineWindow) -> Verdict | None:
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

    def verdict(confidence: float, summary: str, missing: Sequence[str] = ()) -> Verdict:
        return make_verdict("cpu-bound", confidence, scope, evidence, fix, summary, missing)

    if thread_hot:
        who = f"the engine's busiest thread ({name}) uses {pct(thread or 0)} of a core"
        return verdict(
            0.85,
            f"CPU in the path: the GPU is busy {pct(busy)} of the time while {who}.",
        )
    if serial:
        return verdict(
            0.8,
            f"CPU in the path: the GPU is busy {pct(busy)} of the time and the engine's busiest "
            f"thread ({name}) {pct(thread or 0)}: they take turns, each step waits on the CPU.",
        )
    if host_hot and gaps:
        return verdict(
            0.7,
            f"CPU in the path: the GPU is busy only {pct(busy)} of the time while requests run "
            f"and the host CPU is {pct(host_busy or 0)} busy.",
        )
    if host_hot:
        # A saturated host on its own (a shared or small box) proves nothing about the loop.
        return verdict(
            0.45,
            f"Possibly CPU in the path: the host CPU is {pct(host_busy or 0)} busy and the GPU "
            f"{pct(busy)}, but neither the engine thread nor gaps between steps show it.",
        )
    gap_text = f" ({num(gap_ms)} ms between steps)" if gap_ms is not None else ""
    if host is None:
        return verdict(
            0.6,
            f"CPU in the path (inferred): requests ran throughout yet the GPU was busy only "
            f"{pct(busy)} of the time{gap_text}; no host data to confirm it is the engine's CPU.",
            ("host",),
        )
    return verdict(
        0.55,
        f"Host work in the path (inferred): requests ran throughout yet the GPU was busy only "
        f"{pct(busy)} of the time{gap_text}, though the busiest engine thread uses only "
        f"{pct(thread or 0)} of a core: look at other threads, processes or I/O in the loop.",
    )


def _cpu_bound_box(ctx: Context) -> Verdict | None:
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


def with_profile(ctx: Context, v: Verdict | None) -> Verdict | None:
    """Name the functions the hot thread runs, and take the fix from what dominates them."""
    prof = ctx.window.cpu_profile
    if v is None or prof is None or not prof.functions:
        return v
    thread = prof.thread or f"thread {prof.tid}"
    summary = f"{v.summary} {thread} thread: {describe(prof.functions, 3)}."
    # Keep the rule's measured gain ("steps could run up to 3.3x as often"): it still holds.
    gain = re.search(r": without the CPU gap.*$", v.fix)
    fix = fix_for(prof.kinds, prof.functions) + (gain.group(0) if gain else "")
    return dataclasses.replace(v, summary=summary, fix=fix, cpu_profile=prof)


def cpu_bound_engine(ctx: Context, e: EngineWindow) -> Verdict | None:
    return with_profile(ctx, _cpu_bound_engine(ctx, e))


def cpu_bound_box(ctx: Context) -> Verdict | None:
    return with_profile(ctx, _cpu_bound_box(ctx))
