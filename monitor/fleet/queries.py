"""The few PromQL expressions the fleet view needs: one per family, aggregated on the server.

Each expression keeps only the labels the view shows (the host label, the GPU index and
model, the engine's identity, the verdict's cause and scope), so the answer for 4,000 GPUs is
4,000 short series, not 4,000 series with every scrape label. ``max`` merges duplicates (the
same agent scraped by two jobs) and is the value itself otherwise.
"""

from __future__ import annotations

# How far back a host counts as part of the fleet: an agent that stopped within this range
# is listed as stale; one gone longer is forgotten, as Prometheus forgets it.
SEEN_RANGE = "1h"

GPU_FAMILIES = {
    "util": "headroom_gpu_utilization_ratio",
    "sm_active": "headroom_gpu_sm_active_ratio",
}
ENGINE_FAMILIES = {
    "running": "headroom_engine_requests_running",
    "waiting": "headroom_engine_requests_waiting",
    "kv_cache_usage": "headroom_engine_kv_cache_usage_ratio",
    "headroom_factor": "headroom_engine_load_headroom_ratio",
    "energy_per_token_joules": "headroom_engine_energy_per_token_joules",
}
# Spare capacity: the rate an engine completes at its first limit less what it completes
# now, in requests/s (negative past the limit); one query for both. Summed per host and over
# the fleet in Python, so a host whose engine has no rate at its limit shows a dash, not 0.
SPARE = (
    "max by ({by}) (headroom_engine_rate_at_limit_requests_per_second{sel}) "
    "- max by ({by}) (headroom_engine_requests_per_second{sel})"
)
# GPU figures that are a counter's rate: each GPU's mean power from its energy counter,
# between the readings of its last two scrapes (irate): rate() over a range divides by the
# whole range, so for a range's length after an agent starts it reads a fraction of it.
GPU_RATES = {"power_watts": "headroom_gpu_energy_joules_total"}
RATE_RANGE = "2m"
ENGINE_KEY = ("url", "model_name", "engine")
GPU_KEY = ("gpu", "model")


def fleet_queries(host_label: str, matchers: str = "") -> dict[str, str]:
    """Name -> expression. ``matchers`` narrows every family (e.g. job="headroom")."""

    sel = "{" + matchers + "}" if matchers else ""
    by_gpu = ", ".join((host_label, *GPU_KEY))
    by_engine = ", ".join((host_label, *ENGINE_KEY))
    out: dict[str, str] = {}
    for field, family in GPU_FAMILIES.items():
        out[f"gpu.{field}"] = f"max by ({by_gpu}) ({family}{sel})"
    for field, family in GPU_RATES.items():
        # "and" the agent's tick series now: a rate outlives its agent by the range, and
        # the counter (stamped with its reading's time, so never marked stale by
        # Prometheus) by five minutes; the tick series end at the agent's failed scrape.
        out[f"gpu.{field}"] = (
            f"max by ({by_gpu}) (irate({family}{sel}[{RATE_RANGE}]) "
            f"and on ({host_label}) headroom_agent_last_tick_timestamp_seconds{sel})"
        )
    for field, family in ENGINE_FAMILIES.items():
        out[f"engine.{field}"] = f"max by ({by_engine}) ({family}{sel})"
    out["engine.spare_rps"] = SPARE.format(by=by_engine, sel=sel)
    out["engine.first_limit"] = (
        f"max by ({by_engine}, limit) (headroom_engine_first_limit{sel} == 1)"
    )
    # Only current verdicts carry a confidence, so this one family lists them all.
    out["verdicts"] = f"max by ({host_label}, cause, scope) (headroom_diagnosis_confidence{sel})"
    out["verdict_rank"] = f"max by ({host_label}, cause, scope) (headroom_diagnosis_rank{sel})"
    # Now: the agents Prometheus still has (a dead agent's series end at its failed scrape).
    out["tick_age"] = (
        f"time() - max by ({host_label}) (headroom_agent_last_tick_timestamp_seconds{sel})"
    )
    # Over the last hour: the agents that were there, so a dead one is listed, not forgotten.
    out["last_tick_age"] = (
        f"time() - max by ({host_label}) "
        f"(max_over_time(headroom_agent_last_tick_timestamp_seconds{sel}[{SEEN_RANGE}]))"
    )
    return out
