"""The engine's scheduler: too little load (starved), or a cap on what it runs (sequences, KV cache, token budget)."""

from __future__ import annotations

import math
import time

from monitor.diagnosis import figures as fig
from monitor.diagnosis.energy import money, physical_gpus
from monitor.diagnosis.idle_rules import engine_idle, gpus_power
from monitor.diagnosis.rule_kit import Context, engine_table, ev, make_verdict, num, pct
from monitor.diagnosis.verdict import Evidence, Verdict
from monitor.text.capacity import GROWTH_SHOWN, longer
from monitor.window.scopes import engine_scope
from monitor.window.stats import EngineWindow


def cap_words(cap: fig.SeqCap) -> str:
    """Where a sequence cap came from, in words for a summary."""
    if cap.origin == "given":
        return "given with --max-num-seqs"
    if cap.origin == "reported":
        return {
            "server_info": "as the engine's /server_info reports it",
            "cmdline": "as set on the engine's command line",
        }.get(cap.reported_by or "", "as the engine reports it")
    if cap.origin == "remembered" and cap.seen_at is not None:
        return f"inferred from a plateau last seen at {time.strftime('%H:%M:%S', time.localtime(cap.seen_at))}"
    return "inferred from the plateau of running while requests wait"


def starved(ctx: Context, e: EngineWindow) -> Verdict | None:
    th = ctx.th
    if engine_idle(e, th) or e.running_mean is None or fig.queue_sustained(e, th):
        return None
    cap = ctx.seq_cap(e)
    limit = th.starved_running_share * cap.value if cap.value is not None else None
    if limit is not None and e.running_mean > limit:
        return None
    activity = fig.gpu_activity(ctx.gpus)
    compute_sat = fig.compute_saturated(ctx.gpus, th)
    if compute_sat:
        return None  # tensor cores already busy: more load would only add latency
    if cap.value is None and compute_sat is not False:
        # No cap to be below, and no GPU reading that shows room (tensor cores not
        # saturated): nothing says more load would fit.
        return None
    missing: list[str] = []
    conf = 0.85
    if activity is None:
        missing.append("gpu")
        conf -= 0.15
    elif compute_sat is None and fig.gpus_saturated(ctx.gpus, th):
        conf -= 0.1  # busy, and no tensor metric to say whether it is compute or memory
    if cap.value is None:
        conf -= 0.1
    lit = ctx.littles(e)
    filled = ctx.cap_fill(e)
    fill = filled.today_rps if filled is not None else None
    share = fig.waiting_share(e)
    queue_words = "nothing waits"
    if e.waiting_mean is not None and e.waiting_mean > th.waiting_min:
        # The queue is not sustained because it comes and goes: say so, not "nothing waits".
        evidence = [ev("waiting_share", share, th.waiting_sustained, "<", "ratio")]
        queue_words = f"requests wait only now and then ({pct(share or 0)} of readings)"
    else:
        evidence = [ev("waiting_mean", e.waiting_mean, th.waiting_min, "<=")]
    if limit is not None:
        evidence.append(ev("running_mean", e.running_mean, limit, "<="))
    else:
        evidence.append(ev("running_mean", e.running_mean))
    evidence.append(ev("seq_cap", cap.value))
    if activity is not None:
        tensor = fig.tensor_active_mean(ctx.gpus)
        evidence.append(ev("gpu_activity", activity, unit="ratio"))
        evidence.append(ev("tensor_active", tensor, th.tensor_high, "<", "ratio"))
    evidence += [
        ev("littles_in_flight", lit.in_flight),
        ev("requests_per_s", lit.throughput_rps, unit="req/s"),
        ev("slot_latency_s", lit.slot_latency_s, unit="s"),
        ev("fill_rate_rps", fill, unit="req/s"),
    ]
    if filled is not None and filled.growth >= GROWTH_SHOWN:
        evidence += [
            ev("fill_latency_growth", filled.growth),
            ev("fill_rate_at_cap_rps", filled.rps, unit="req/s"),
        ]
    now = []
    if lit.throughput_rps is not None:
        now.append(f"now {num(lit.throughput_rps)} req/s")
    if lit.in_flight is not None:
        now.append(f"{num(lit.in_flight)} in flight")
    if lit.slot_latency_s is not None:
        now.append(f"each holds a slot {num(lit.slot_latency_s)} s")
    now_text = f" ({', '.join(now)})" if now else ""
    room = ctx.headroom(e)
    if cap.value is None:
        fix = (
            f"send more load until requests start to queue{now_text}; cap unknown: pass "
            "--max-num-seqs for the rate that fills it; check any gateway's concurrency limit"
        )
    elif filled is not None and filled.first is not None and room is not None:
        # Another limit binds before the slots fill: the rate that fills them is no target.
        rate = room.get("rate_at_limit_rps")
        upto = f"about {num(room['concurrency_at_limit'])} running"
        if rate is not None:
            upto = f"about {num(rate)} req/s ({num(room['concurrency_at_limit'])} running)"
        fix = (
            f"send more load, up to {upto}: {filled.first} binds there, before the "
            f"{cap.value} slots fill{now_text}; check any gateway's concurrency limit"
        )
    elif filled is not None and filled.rps is not None:
        # One figure: the rate at the cap with the longer steps there (the headroom figure's),
        # and today's request time's only as its label says.
        more = longer(filled.growth)
        notes = [f"{num(fill)} req/s at today's request time"] if more and fill else []
        notes += [", ".join(now)] if now else []
        fix = (
            f"send about {num(filled.rps)} req/s to fill {cap.value} slots"
            + (f", {more}" if more else "")
            + (f" ({'; '.join(notes)})" if notes else "")
            + "; check any gateway's concurrency limit"
        )
    else:
        fix = (
            f"send more load: about {cap.value} requests in flight would fill the slots"
            f"{now_text}; check any gateway's concurrency limit"
        )
    if activity is None:
        gpu_text = " (no GPU data)"
    else:
        what = "SMs" if fig.sm_active_mean(ctx.gpus) is not None else "GPU"
        gpu_text = f", {what} {pct(activity)} active"
    slots = (
        f"{num(e.running_mean)} of {cap.value} slots busy"
        if cap.value
        else (f"{num(e.running_mean)} running (cap unknown)")
    )
    summary = f"Starved: {slots} and {queue_words}{gpu_text}."
    summary += starved_bill(ctx, activity, evidence)
    return make_verdict("starved", conf, engine_scope(e), evidence, fix, summary, missing)


def starved_bill(ctx: Context, activity: float | None, evidence: list[Evidence]) -> str:
    """The idle part of a starved box's bill: what its GPUs draw and, with a price, the
    share of the GPU-hours paid that the missing load leaves unused."""
    watts = gpus_power(ctx.gpus)
    boards = len(physical_gpus(ctx.gpus))
    price = ctx.gpu_hour_price
    if not boards or (watts is None and price is None):
        return ""
    parts = []
    if watts is not None:
        evidence.append(ev("gpu_power_watts", watts, unit="W"))
        parts.append(f"The GPUs draw {watts:.0f} W ({watts * 3600 / 1e6:.2f} MJ an hour)")
    if price is not None and activity is not None:
        unused = max(0.0, 1.0 - activity) * price * boards
        evidence.append(ev("idle_cost_per_hour", unused, unit="$/h"))
        parts.append(
            f"{money(unused)} an hour of the {money(price * boards)} paid at "
            f"{money(price)}/GPU-hour buys capacity left unused"
        )
    return " " + "; ".join(parts) + "." if parts else ""


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
    table = engine_table(e)
    fix = f"give the KV cache more room: {table.kv_room}"
    if e.running_mean:
        # A whole number: the flag takes one, and the mean running is what fit without help.
        fit = max(1, math.floor(e.running_mean))
        fix += f"; or lower {table.seq_cap_setting} to {fit} to stop preemptions"
    summary = f"KV-cache cap: {', '.join(parts)}."
    return make_verdict("kv-cap", conf, engine_scope(e), evidence, fix, summary)


def seq_cap(ctx: Context, e: EngineWindow, token_pinned: bool) -> Verdict | None:
    th = ctx.th
    if not fig.queue_sustained(e, th):
        return None
    cap = ctx.seq_cap(e)
    if cap.value is None or cap.at_cap_share is None:
        return None
    if cap.at_cap_share < th.plateau_share:
        return None
    kv = e.kv_cache_usage_mean
    if kv is not None and kv >= th.kv_full:
        return None
    if e.preemptions_per_s is not None and e.preemptions_per_s > th.preemptions_per_s_min:
        return None
    guessed = cap.origin in ("inferred", "remembered")
    conf = 0.9 if not guessed else 0.8
    if e.waiting_capacity_mean:
        conf += 0.05  # vLLM says the waiting wait for capacity
    ttft_note = ""
    dom = fig.ttft_dominant(fig.ttft_parts(e), th.ttft_part_dominant)
    queue_share = dom[1] if dom is not None and dom[0] == "queue" else None
    if queue_share is not None:
        # The wait the user feels is the cap's doing: first tokens come late because
        # requests wait for a slot, not because prefill is slow.
        conf = min(conf + 0.05, 0.95)
        ttft_note = f"; {pct(queue_share)} of the time to first token is the wait for a slot"
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
    if guessed and token_pinned:
        conf = min(conf, 0.45)
        notes.append("engine steps also fill the token budget: the plateau may come from it")
    evidence = [
        ev("waiting_mean", e.waiting_mean, th.waiting_min, ">"),
        ev("waiting_share", fig.waiting_share(e), th.waiting_sustained, ">="),
        ev("running_at_cap_share", cap.at_cap_share, th.plateau_share, ">="),
        ev("seq_cap", cap.value),
        ev("kv_cache_usage_mean", kv, th.kv_full, "<"),
    ]
    if e.waiting_capacity_mean is not None:
        evidence.append(ev("waiting_capacity_mean", e.waiting_capacity_mean))
    if queue_share is not None:
        evidence.append(ev("ttft_queue_share", queue_share, th.ttft_part_dominant, ">=", "ratio"))
    evidence += ctx.gpu_evidence() if ctx.has_gpu else []
    how = cap_words(cap)
    waiting = num(e.waiting_mean or 0)
    kv_text = f"; KV cache {pct(kv)} used" if kv is not None else ""
    fix = (
        f"raise {engine_table(e).seq_cap_setting} above {cap.value} (running sits at {cap.value} while "
        f"{waiting} wait{kv_text})"
    )
    summary = (
        f"Sequence cap: running sits at {cap.value} ({how}) while {waiting} requests wait"
        f"{ttft_note}{'; ' + '; '.join(notes) if notes else ''}."
    )
    return make_verdict("seq-cap", conf, engine_scope(e), evidence, fix, summary, missing)


def token_cap(ctx: Context, e: EngineWindow) -> Verdict | None:
    th = ctx.th
    budget = ctx.token_budget(e)
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
    dom = fig.ttft_dominant(fig.ttft_parts(e), th.ttft_part_dominant)
    prefill_part = dom[1] if dom is not None and dom[0] == "prefill" and prefill_heavy else None
    ttft_note = ""
    if prefill_part is not None:
        # Prompts chunked over full steps: the first token waits for the last chunk.
        conf = min(conf + 0.05, 0.9)
        ttft_note = f"; prefill is {pct(prefill_part)} of the time to first token"
    saturated_note = ""
    if fig.compute_saturated(ctx.gpus, th):
        # Full steps on busy tensor cores: a bigger budget would not make them faster.
        conf = min(conf, 0.4)
        saturated_note = "; the tensor cores are saturated, so a bigger budget adds little"
    elif not fig.queue_sustained(e, th) and budget.origin != "inferred":
        # Steps fill the budget but nothing waits for it: prompts are chunked over more steps
        # (a longer TTFT), yet every request is admitted. A hint, not the box's limit.
        conf = min(conf, 0.45)
        saturated_note = "; nothing waits, so a bigger budget shortens TTFT more than it adds load"
    evidence = [
        ev("token_pinned_share", budget.pinned_share, th.token_pinned_share, ">="),
        ev("token_budget", budget.value),
        ev("prefill_share", budget.prefill_share, th.prefill_share_min, ">="),
        ev("iteration_tokens_mean", e.iteration_tokens_mean, unit="tokens"),
        ev("waiting_mean", e.waiting_mean),
    ]
    if prefill_part is not None:
        evidence.append(
            ev("ttft_prefill_share", prefill_part, th.ttft_part_dominant, ">=", "ratio")
        )
    how = {
        "inferred": "inferred from the iteration-tokens histogram",
        "reported": "as the engine reports it",
    }.get(budget.origin or "", "given")
    if budget.mean_fill is not None:
        # Read from the mean, not the buckets (vLLM V1 counts a chunked prompt at its last step).
        at = (
            f"engine steps carry {num(e.iteration_tokens_mean)} tokens on average, "
            f"{pct(budget.mean_fill)} of the budget of {budget.value}"
        )
        share = f"engine steps average {pct(budget.mean_fill)} of it"
    else:
        at = (
            f"{pct(budget.pinned_share)} of engine steps are at the budget of {budget.value} tokens"
        )
        share = f"{pct(budget.pinned_share)} of engine steps fill it"
    fix = f"raise --max-num-batched-tokens above {budget.value} ({share})"
    if prefill_heavy:
        fix += f"; prompts are {pct(budget.prefill_share or 0)} of tokens"
    summary = f"Token budget: {at} ({how}){ttft_note}{saturated_note}."
    return make_verdict("token-cap", conf, engine_scope(e), evidence, fix, summary)
