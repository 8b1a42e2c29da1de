"""Read the fleet from a PromQL API: a handful of instant queries, then assemble and rank."""

from __future__ import annotations

from monitor.core.errors import NoDataError
from monitor.fleet.model import STALE_AFTER_S, Fleet, assemble
from monitor.fleet.promql import PromQL
from monitor.fleet.queries import fleet_queries


def read_fleet(
    client: PromQL,
    host_label: str = "instance",
    matchers: str = "",
    stale_after_s: float = STALE_AFTER_S,
) -> Fleet:
    answers = client.query_many(fleet_queries(host_label, matchers))
    fleet = assemble(
        answers, host_label=host_label, stale_after_s=stale_after_s, source=client.shown
    )
    if not fleet.hosts:
        narrowed = f" matching {{{matchers}}}" if matchers else ""
        when = f" at {client.at:.0f}" if client.at is not None else ""
        raise NoDataError(
            f"no headroom_* series{narrowed} in Prometheus at {client.shown}{when} "
            "(is it scraping the headroom agents?)"
        )
    return fleet
