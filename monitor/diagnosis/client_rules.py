"""The load generator itself as the limit."""

from __future__ import annotations

from monitor.diagnosis.rule_kit import BOX, Context, ev, make_verdict, num, pct
from monitor.diagnosis.verdict import Verdict


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
