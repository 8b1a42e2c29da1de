"""A few agents without Prometheus: each agent's /api/v1/snapshot read straight, as a Fleet.

For `watch --remote URL --remote URL ...`: the same list and drill-down as the Prometheus
fleet, for the handful of boxes one person watches. The figures are the agents' own report
fields (window means), the verdicts the agents' current ones. An agent that does not answer
is listed, stale, with the reason.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import urlsplit

import httpx

from monitor.core.errors import EndpointError
from monitor.fleet.model import (
    STALE_AFTER_S,
    Fleet,
    FleetEngine,
    FleetGpu,
    FleetHost,
    FleetVerdict,
    rank,
)
from monitor.sources.promtext import display_url


def snapshot_url(agent_url: str) -> str:
    url = agent_url.strip().rstrip("/")
    if "://" not in url:
        url = "http://" + url
    return url.removesuffix("/api/v1/snapshot") + "/api/v1/snapshot"


def read_report(client: httpx.Client, url: str) -> dict[str, Any]:
    """An agent's latest report from its snapshot ``url``; EndpointError, one line without the
    URL's credentials, where it cannot be read (down, an HTTP error, not a headroom report)."""
    shown = display_url(url)
    try:
        resp = client.get(url)
    except httpx.HTTPError as exc:
        raise EndpointError(f"{shown}: {type(exc).__name__}: {exc}".rstrip(": ")) from None
    if resp.status_code != 200:
        why = _STATUS_WORDS.get(resp.status_code, "")
        raise EndpointError(f"{shown}: HTTP {resp.status_code}{why}")
    try:
        report = resp.json()
    except ValueError:
        raise EndpointError(f"{shown}: the answer is not JSON") from None
    if not isinstance(report, dict) or "gpus" not in report or "engines" not in report:
        raise EndpointError(f"{shown}: the answer is not a headroom report")
    return report


# What an agent's own answers mean (monitor/serve/agent.py).
_STATUS_WORDS = {401: ": the agent asks for credentials", 503: ": the agent has no reading yet"}


def instance_of(url: str) -> str:
    parts = urlsplit(url)
    return parts.netloc.rpartition("@")[2] or url


def _power(g: Mapping[str, Any], window_s: Any) -> float | None:
    """A GPU's mean power over the agent's window, from its energy there (as the Prometheus
    path reads it from the energy counter's rate); None without an energy reading."""
    joules, span = _num(g.get("energy_joules")), _num(window_s)
    return joules / span if joules is not None and span else None


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def host_from_report(
    instance: str, report: Mapping[str, Any], now: float, stale_after_s: float = STALE_AFTER_S
) -> FleetHost:
    gpus = tuple(
        FleetGpu(
            gpu=str(g.get("index")),
            model=str(g.get("name") or ""),
            util=_num(g.get("util")),
            sm_active=_num(g.get("sm_active")),
            power_watts=_power(g, report.get("window_s")),
        )  # fmt: skip
        for g in report.get("gpus") or ()
    )
    engines = []
    for e in report.get("engines") or ():
        room = (e.get("analysis") or {}).get("headroom") or {}
        engines.append(
            FleetEngine(
                url=str(e.get("url")),
                model_name=str(e.get("model_name")),
                engine=str(e.get("engine")),
                running=_num(e.get("running")),
                waiting=_num(e.get("waiting")),
                kv_cache_usage=_num(e.get("kv_cache_usage")),
                headroom_factor=_num(room.get("factor")),
                first_limit=room.get("limit") or None,
                energy_per_token_joules=_num(e.get("energy_per_token_joules")),
            )
        )
    # The snapshot lists its verdicts in the diagnosis's order already: keep it.
    verdicts = [
        FleetVerdict(str(v.get("cause")), str(v.get("scope")), _num(v.get("confidence")), float(i))
        for i, v in enumerate(report.get("verdicts") or ())
    ]
    stamp = _num(report.get("time"))
    return FleetHost(
        instance=instance,
        gpus=gpus,
        engines=tuple(engines),
        verdicts=tuple(verdicts),
        last_tick_age_s=None if stamp is None else max(0.0, now - stamp),
        stale_after_s=stale_after_s,
    )


def read_agents(
    urls: Sequence[str],
    timeout: float = 2.0,
    stale_after_s: float = STALE_AFTER_S,
    wall: Callable[[], float] = time.time,
) -> Fleet:
    """Every agent's snapshot at once; one that fails is a stale host carrying the reason."""
    targets = [snapshot_url(u) for u in urls]

    def one(client: httpx.Client, url: str) -> FleetHost:
        instance = instance_of(url)
        try:
            report = read_report(client, url)
        except EndpointError as exc:
            return FleetHost(
                instance=instance, present=False, note=str(exc), stale_after_s=stale_after_s
            )
        return host_from_report(instance, report, wall(), stale_after_s)

    with (
        httpx.Client(timeout=timeout) as client,
        ThreadPoolExecutor(max_workers=min(8, len(targets)) or 1) as pool,
    ):
        hosts = list(pool.map(lambda u: one(client, u), targets))
    return Fleet(rank(hosts), source=f"{len(targets)} agents", time=wall(), host_label="agent")
