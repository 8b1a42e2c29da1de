"""The fleet as plain frozen data, assembled from the query answers and ranked by wasted GPU.

Wasted GPU is GPUs x (1 - SM active): a host of eight GPUs whose SMs are 10% active wastes
7.2 GPUs; at a price per GPU-hour (--gpu-hour-price) that is money an hour. A GPU whose SM activity was not read (no GPM, no DCGM profiling) adds nothing and
is counted apart; a host with no SM reading at all has no figure and ranks after those that
have one. A reading that is absent stays None here and a dash on screen, never 0.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from monitor.fleet.promql import Answer
from monitor.fleet.queries import ENGINE_FAMILIES, ENGINE_KEY, GPU_FAMILIES, GPU_RATES

# A host whose agent has not ticked for this long is stale: its numbers are old or gone.
STALE_AFTER_S = 60.0


def _known(values: Iterable[float | None]) -> list[float]:
    return [v for v in values if v is not None]


def _sum_known(values: Iterable[float | None]) -> float | None:
    """The sum of the values read (None when none was)."""
    known = _known(values)
    return sum(known) if known else None


def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


def _json(obj: object, names: Sequence[str]) -> dict[str, Any]:
    """The JSON object of a fleet row: these attributes by their own names, in this order."""
    return {name: getattr(obj, name) for name in names}


@dataclass(frozen=True, slots=True)
class FleetGpu:
    gpu: str
    model: str
    util: float | None = None
    sm_active: float | None = None
    power_watts: float | None = None  # from its energy counter's rate

    @property
    def wasted(self) -> float | None:
        return None if self.sm_active is None else max(0.0, 1.0 - self.sm_active)

    def to_json(self) -> dict[str, Any]:
        return _json(self, ("gpu", "model", "util", "sm_active", "wasted", "power_watts"))


@dataclass(frozen=True, slots=True)
class FleetEngine:
    url: str
    model_name: str
    engine: str
    running: float | None = None
    waiting: float | None = None
    kv_cache_usage: float | None = None
    headroom_factor: float | None = None
    first_limit: str | None = None
    energy_per_token_joules: float | None = None
    # Requests/s it completes at its first limit less those it completes now.
    spare_rps: float | None = None

    @property
    def scope(self) -> str:
        # monitor.window.scopes.engine_scope's spelling, so the verdicts find their engine.
        return f"engine:{self.model_name}/{self.engine}@{self.url}"

    def to_json(self) -> dict[str, Any]:
        return _json(self, _field_names(FleetEngine))


@dataclass(frozen=True, slots=True)
class FleetVerdict:
    cause: str
    scope: str
    confidence: float | None
    # The agent's own order (0 leads). A cap the scheduler imposes leads a confident GPU
    # verdict it explains, so the most confident verdict is not always the cause.
    rank: float | None = None

    def to_json(self) -> dict[str, Any]:
        return _json(self, _field_names(FleetVerdict))

    def order_key(self) -> tuple[float, float, bool, str, str]:
        """The agent's order where it exported one; else the most confident first."""
        return (
            math.inf if self.rank is None else self.rank,
            -(self.confidence or 0.0),
            self.scope != "box",
            self.scope,
            self.cause,
        )


@dataclass(frozen=True, slots=True)
class FleetHost:
    instance: str
    gpus: tuple[FleetGpu, ...] = ()
    engines: tuple[FleetEngine, ...] = ()
    verdicts: tuple[FleetVerdict, ...] = ()  # in the agent's order (FleetVerdict.order_key)
    last_tick_age_s: float | None = None
    stale_after_s: float = STALE_AFTER_S
    present: bool = True  # Prometheus has the agent's series now (its last scrape worked)
    note: str | None = None  # why the host has no readings (an agent that did not answer)
    gpu_hour_price: float | None = None  # what one GPU costs an hour (None: not given)

    @property
    def stale(self) -> bool:
        """The agent is gone from Prometheus, its last tick is old, or it never ticked."""
        return (
            not self.present
            or self.last_tick_age_s is None
            or self.last_tick_age_s > self.stale_after_s
        )

    @property
    def wasted(self) -> float | None:
        return _sum_known(g.wasted for g in self.gpus)

    @property
    def wasted_cost_per_hour(self) -> float | None:
        """The wasted GPUs in money an hour, at the price."""
        wasted = self.wasted
        if wasted is None or self.gpu_hour_price is None:
            return None
        return wasted * self.gpu_hour_price

    @property
    def power_watts(self) -> float | None:
        """Every GPU's power together (None unless each was read)."""
        values = [g.power_watts for g in self.gpus]
        if not values or any(v is None for v in values):
            return None
        return sum(v for v in values if v is not None)

    @property
    def spare_rps(self) -> float | None:
        """Requests/s more its engines complete at their limits than now (None: none read)."""
        return self.engine_sum("spare_rps")

    @property
    def gpus_without_sm_active(self) -> int:
        return sum(1 for g in self.gpus if g.sm_active is None)

    @property
    def verdict(self) -> FleetVerdict | None:
        """The host's headline: its most confident current verdict."""
        return self.verdicts[0] if self.verdicts else None

    def verdict_for(self, scope: str) -> FleetVerdict | None:
        return next((v for v in self.verdicts if v.scope == scope), None)

    def mean(self, field_name: str) -> float | None:
        known = _known(getattr(g, field_name) for g in self.gpus)
        return sum(known) / len(known) if known else None

    def engine_sum(self, field_name: str) -> float | None:
        return _sum_known(getattr(e, field_name) for e in self.engines)

    def engine_max(self, field_name: str) -> float | None:
        known = _known(getattr(e, field_name) for e in self.engines)
        return max(known) if known else None

    def to_json(self) -> dict[str, Any]:
        top = self.verdict
        return {
            "instance": self.instance,
            "stale": self.stale,
            "present": self.present,
            "note": self.note,
            "last_tick_age_s": self.last_tick_age_s,
            "wasted_gpus": self.wasted,
            "wasted_cost_per_hour": self.wasted_cost_per_hour,
            "power_watts": self.power_watts,
            "spare_rps": self.spare_rps,
            "gpus_without_sm_active": self.gpus_without_sm_active,
            "cause": top.cause if top else None,
            "confidence": top.confidence if top else None,
            "gpus": [g.to_json() for g in self.gpus],
            "engines": [e.to_json() for e in self.engines],
            "verdicts": [v.to_json() for v in self.verdicts],
        }


@dataclass(frozen=True, slots=True)
class Fleet:
    hosts: tuple[FleetHost, ...]  # ranked: most wasted GPU first
    source: str = ""
    time: float | None = None  # the evaluation time of the answers
    host_label: str = "instance"
    notes: tuple[str, ...] = field(default=())
    gpu_hour_price: float | None = None

    @property
    def gpu_count(self) -> int:
        return sum(len(h.gpus) for h in self.hosts)

    @property
    def engine_count(self) -> int:
        return sum(len(h.engines) for h in self.hosts)

    @property
    def wasted(self) -> float | None:
        return _sum_known(h.wasted for h in self.hosts)

    @property
    def wasted_cost_per_hour(self) -> float | None:
        return _sum_known(h.wasted_cost_per_hour for h in self.hosts)

    @property
    def spare_rps(self) -> float | None:
        """The fleet's spare capacity: every host's spare requests/s together."""
        return _sum_known(h.spare_rps for h in self.hosts)

    def priced(self, gpu_hour_price: float | None) -> Fleet:
        """The same fleet with its waste in money at ``gpu_hour_price`` (None: GPUs only)."""
        hosts = tuple(dataclasses.replace(h, gpu_hour_price=gpu_hour_price) for h in self.hosts)
        return dataclasses.replace(self, hosts=hosts, gpu_hour_price=gpu_hour_price)

    def host(self, instance: str) -> FleetHost | None:
        return next((h for h in self.hosts if h.instance == instance), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "prometheus": self.source,
            "time": self.time,
            "host_label": self.host_label,
            "gpu_count": self.gpu_count,
            "engine_count": self.engine_count,
            "wasted_gpus": self.wasted,
            "gpu_hour_price": self.gpu_hour_price,
            "wasted_cost_per_hour": self.wasted_cost_per_hour,
            "spare_rps": self.spare_rps,
            "hosts": [h.to_json() for h in self.hosts],
        }


def rank(hosts: Sequence[FleetHost]) -> tuple[FleetHost, ...]:
    """Most wasted GPU first; hosts without an SM reading after every host with one."""

    def key(h: FleetHost) -> tuple[int, float, str]:
        wasted = h.wasted
        return (wasted is None, -(wasted or 0.0), h.instance)

    return tuple(sorted(hosts, key=key))


def _gpu_order(g: FleetGpu) -> tuple[int, str]:
    return (int(g.gpu), "") if g.gpu.isdigit() else (1 << 30, g.gpu)


def _finite(v: float | None) -> float | None:
    return v if v is not None and math.isfinite(v) else None


def assemble(
    answers: Mapping[str, Answer],
    host_label: str = "instance",
    stale_after_s: float = STALE_AFTER_S,
    source: str = "",
) -> Fleet:
    """One FleetHost per host label value seen in any answer; each reading where it was read."""
    gpus: dict[str, dict[tuple[str, str], dict[str, Any]]] = {}
    engines: dict[str, dict[tuple[str, ...], dict[str, Any]]] = {}
    verdicts: dict[str, list[FleetVerdict]] = {}
    ranks: dict[tuple[str, str, str], float | None] = {}
    ages: dict[str, float | None] = {}
    now: dict[str, float | None] = {}
    hosts: set[str] = set()
    when: float | None = None

    def host_of(labels: Mapping[str, str]) -> str:
        host = labels.get(host_label, "")
        hosts.add(host)
        return host

    for name, answer in answers.items():
        if answer.samples and math.isfinite(answer.time):
            when = answer.time
        for s in answer.samples:
            host = host_of(s.labels)
            if name.startswith("gpu."):
                key = (s.labels.get("gpu", ""), s.labels.get("model", ""))
                gpus.setdefault(host, {}).setdefault(key, {})[name[4:]] = _finite(s.value)
            elif name == "engine.first_limit":
                ekey = tuple(s.labels.get(k, "") for k in ENGINE_KEY)
                engines.setdefault(host, {}).setdefault(ekey, {})["first_limit"] = s.labels.get(
                    "limit"
                )
            elif name.startswith("engine."):
                ekey = tuple(s.labels.get(k, "") for k in ENGINE_KEY)
                engines.setdefault(host, {}).setdefault(ekey, {})[name[7:]] = _finite(s.value)
            elif name == "verdicts":
                verdicts.setdefault(host, []).append(
                    FleetVerdict(s.labels.get("cause", ""), s.labels.get("scope", ""), s.value)
                )
            elif name == "verdict_rank":
                ranks[(host, s.labels.get("cause", ""), s.labels.get("scope", ""))] = _finite(
                    s.value
                )
            elif name == "last_tick_age":
                ages[host] = _finite(s.value)
            elif name == "tick_age":
                now[host] = _finite(s.value)

    out = []
    for host in hosts:
        host_gpus = tuple(
            sorted(
                (
                    FleetGpu(
                        gpu=k[0], model=k[1], **{f: v.get(f) for f in (*GPU_FAMILIES, *GPU_RATES)}
                    )
                    for k, v in gpus.get(host, {}).items()
                ),
                key=_gpu_order,
            )
        )
        host_engines = tuple(
            FleetEngine(
                *k,
                **{f: v.get(f) for f in ENGINE_FAMILIES},
                first_limit=v.get("first_limit"),
                spare_rps=v.get("spare_rps"),
            )
            for k, v in sorted(engines.get(host, {}).items())
        )
        host_verdicts = tuple(
            sorted(
                (
                    dataclasses.replace(v, rank=ranks.get((host, v.cause, v.scope)))
                    for v in verdicts.get(host, ())
                ),
                key=FleetVerdict.order_key,
            )
        )
        out.append(
            FleetHost(
                instance=host,
                gpus=host_gpus,
                engines=host_engines,
                verdicts=host_verdicts,
                last_tick_age_s=now.get(host, ages.get(host)),
                stale_after_s=stale_after_s,
                present=host in now,
            )
        )
    return Fleet(rank(out), source=source, time=when, host_label=host_label)
