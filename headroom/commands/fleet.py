"""`headroom fleet`: every host's cause at once, read back from Prometheus (or any PromQL API)."""

from __future__ import annotations

import argparse
import json
import re
from datetime import datetime, timezone
from typing import Any

from headroom.commands.common import add_price_flag, add_raw_parser, gpu_hour_price
from monitor.core.errors import ConfigError

EPILOG = """\
examples:
  headroom fleet --prometheus http://prometheus:9090
  headroom fleet --prometheus http://prometheus:9090 --selector 'job="headroom"' --top 20
  headroom fleet --prometheus https://thanos.example/ --host-label box --json

Credentials for the query API come from the environment: HEADROOM_PROMETHEUS_TOKEN (a bearer
token), or HEADROOM_PROMETHEUS_USER and HEADROOM_PROMETHEUS_PASSWORD (basic auth);
HEADROOM_PROMETHEUS_ORG_ID sets Mimir's tenant (X-Scope-OrgID).
"""


def add_prometheus_flags(g: argparse._ActionsContainer, required: bool = False) -> None:
    """The flags `fleet` and `watch --prometheus` share."""
    g.add_argument(
        "--prometheus",
        metavar="URL",
        required=required,
        help="a PromQL API (Prometheus, Thanos, Mimir, VictoriaMetrics) scraping the agents",
    )
    g.add_argument(
        "--selector",
        metavar="MATCHERS",
        help='narrow every query with label matchers, e.g. \'job="headroom",env="prod"\'',
    )
    g.add_argument(
        "--host-label",
        default="instance",
        metavar="LABEL",
        help="the label that names a host (default instance; e.g. box behind Thanos)",
    )
    g.add_argument(
        "--stale-after",
        type=float,
        default=60.0,
        metavar="S",
        help="a host whose agent has not ticked for S seconds is stale (default 60)",
    )
    g.add_argument(
        "--prometheus-timeout",
        type=float,
        default=10.0,
        metavar="S",
        help="seconds to wait for each query (default 10)",
    )


HELP = "many hosts at once through Prometheus: each host's cause, ranked by wasted GPU"
DESCRIPTION = """\
Read the headroom agents' series from Prometheus and list one row per host, GPU
and engine: cause, confidence, duty cycle, SM active, running/waiting and KV,
hosts sorted by wasted GPU (GPUs x (1 - SM active))."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = add_raw_parser(sub, "fleet", HELP, DESCRIPTION, EPILOG)
    g = p.add_argument_group("fleet")
    add_prometheus_flags(g, required=True)
    g.add_argument(
        "--at",
        metavar="TIME",
        help="evaluate at this time (Unix seconds or ISO 8601) instead of now",
    )
    g.add_argument("--top", type=int, metavar="N", help="show only the N most wasteful hosts")
    g.add_argument("--json", action="store_true", help="print the fleet as JSON")
    add_price_flag(g)


def parse_time(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        pass
    try:
        when = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(f"--at needs Unix seconds or an ISO 8601 time, not {text!r}") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when.timestamp()


def client_from_args(args: argparse.Namespace, at: float | None = None) -> Any:
    from monitor.fleet.promql import PromQL

    if args.stale_after <= 0:
        raise ConfigError("--stale-after must be positive")
    if not re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", args.host_label):
        raise ConfigError(f"--host-label needs a Prometheus label name, not {args.host_label!r}")
    if args.prometheus_timeout <= 0:
        raise ConfigError("--prometheus-timeout must be positive")
    return PromQL(args.prometheus, timeout=args.prometheus_timeout, at=at)


def run(args: argparse.Namespace) -> int:
    from monitor.fleet.promql import selector_matchers
    from monitor.fleet.read import read_fleet
    from monitor.fleet.render import render

    if args.top is not None and args.top < 1:
        raise ConfigError("--top must be at least 1")
    price = gpu_hour_price(args)
    at = parse_time(args.at) if args.at else None
    matchers = selector_matchers(args.selector)
    with client_from_args(args, at) as client:
        fleet = read_fleet(client, args.host_label, matchers, args.stale_after).priced(price)
    if args.json:
        doc = fleet.to_json()
        if args.top is not None:
            doc["hosts"] = doc["hosts"][: args.top]
        print(json.dumps(doc, indent=1))
    else:
        print(render(fleet, top=args.top))
    return 0
