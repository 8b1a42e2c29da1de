"""`headroom watch`: the terminal UI over this box's sources, a remote agent, or a recording."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from headroom.commands.common import (
    add_diagnosis_flags,
    add_source_flags,
    build_diagnoser_from_args,
    build_sources_from_args,
    gpu_hour_price,
)
from monitor.core.errors import ConfigError, NoDataError

HELP = "live terminal UI: GPUs, engines, host and the diagnosis"
DESCRIPTION = """\
Watch GPUs, serving engines and the host, with the diagnosis in words. Samples in this
process, or reads a running agent (--remote), or plays a recording (--replay). Press ? in
the UI for the keys.
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("watch", help=HELP, description=DESCRIPTION)
    add_source_flags(p)
    add_diagnosis_flags(p)
    g = p.add_argument_group("watch")
    g.add_argument(
        "--remote",
        metavar="AGENT_URL",
        action="append",
        help="read a running agent's /api/v1/snapshot; repeat for a few agents (a list of "
        "them, Enter for one)",
    )
    from headroom.commands.fleet import add_prometheus_flags

    add_prometheus_flags(
        p.add_argument_group(
            "fleet (--prometheus: every host at once, refreshed every --interval s, at least 5)"
        )
    )
    g.add_argument(
        "--interval", type=float, default=1.0, help="seconds between readings (default 1)"
    )
    g.add_argument(
        "--window", type=float, default=10.0, help="seconds each diagnosis looks back (default 10)"
    )
    g.add_argument("--replay", metavar="FILE", help="play back a recording (JSONL)")
    g.add_argument(
        "--speed",
        type=float,
        default=1.0,
        help="replay speed: 2 = twice as fast, 0 = as fast as possible (default 1)",
    )
    g.add_argument(
        "--record", metavar="FILE", help="record from the start to FILE (r toggles it in the UI)"
    )
    g.add_argument("--sweep", metavar="DIR", help="follow a sweep's output directory (w shows it)")
    g.add_argument(
        "--profile-every",
        type=float,
        default=300.0,
        metavar="S",
        help="while cpu-bound holds, profile the engine's hot thread by itself (py-spy, "
        "non-blocking) at most every S seconds per process (default 300; 0 = never; "
        "p on an engine profiles now)",
    )


def _check(args: argparse.Namespace) -> None:
    if args.interval <= 0:
        raise ConfigError("--interval must be positive")
    if args.window <= 0:
        raise ConfigError("--window must be positive")
    if args.speed < 0:
        raise ConfigError("--speed must be 0 (as fast as possible) or positive")
    local_flags = args.vllm or args.dcgm_exporter or args.dcgm or args.pid
    if sum(1 for x in (args.remote, args.replay, args.prometheus) if x) > 1:
        raise ConfigError("--remote, --replay and --prometheus exclude each other")
    if (args.remote or args.replay or args.prometheus) and local_flags:
        raise ConfigError(
            "source flags (--vllm, --dcgm-exporter, ...) apply to local sampling only"
        )


def caps_header(args: argparse.Namespace) -> dict[str, Any]:
    """What a replay needs to diagnose as this session did."""
    return {
        "max_num_seqs": args.max_num_seqs,
        "max_num_batched_tokens": args.max_num_batched_tokens,
        "gpu": args.gpu_model,
    }


def run(args: argparse.Namespace) -> int:
    from monitor.tui.feeds import LocalFeed, RemoteFeed, ReplayFeed

    _check(args)
    if args.prometheus or (args.remote and len(args.remote) > 1):
        return run_fleet(args)
    if args.replay:
        feed: Any = ReplayFeed(args.replay, speed=args.speed)
    elif args.remote:
        feed = RemoteFeed(args.remote[0], interval=args.interval, timeout=args.timeout)
    else:
        from monitor.read.sampler import Sampler
        from monitor.watch.pipeline import Monitor

        diagnoser = build_diagnoser_from_args(args)
        sources, notes = build_sources_from_args(args)
        if not sources:
            raise NoDataError(
                "no source to read: give --vllm URL or --dcgm-exporter URL, or run where NVML works"
            )
        sampler = Sampler(sources, interval=args.interval)
        monitor = Monitor(sampler, diagnoser, window_s=args.window, notes=tuple(notes))
        feed = LocalFeed(monitor, header={"diagnosis": caps_header(args), "notes": list(notes)})
        from monitor.profiling.runner import Profiler

        if args.profile_every < 0:
            raise ConfigError("--profile-every must be 0 (never) or positive")
        feed.profiler = Profiler(
            monitor,
            seconds=min(args.window, 10.0),
            every_s=args.profile_every,
            auto=args.profile_every > 0,
        )
    return run_app(feed, record=args.record, sweep=args.sweep)


def run_fleet(args: argparse.Namespace) -> int:
    """The fleet screen over a PromQL API (whose first read must work: a bad URL is one line
    before the screen opens), or over a few agents read straight (each failure is listed)."""
    from headroom.commands.fleet import client_from_args
    from monitor.tui.fleet import FleetApp
    from monitor.tui.logtail import captured_logs

    price = gpu_hour_price(args)
    client: Any = None
    if args.prometheus:
        from monitor.fleet.promql import selector_matchers
        from monitor.fleet.read import read_fleet

        matchers = selector_matchers(args.selector)
        client = client_from_args(args)
        source = client.shown

        def read() -> Any:
            return read_fleet(client, args.host_label, matchers, args.stale_after).priced(price)

        every = max(args.interval, 5.0)
    else:
        from monitor.fleet.agents import read_agents

        if args.timeout <= 0:
            raise ConfigError("--timeout must be positive")
        source = f"{len(args.remote)} agents"

        def read() -> Any:
            return read_agents(
                args.remote, timeout=args.timeout, stale_after_s=args.stale_after
            ).priced(price)

        every = args.interval
    try:
        if client is not None:
            read()
        app = FleetApp(read, every=every, source=source)
        with captured_logs() as lines:
            app.run()
    finally:
        if client is not None:
            client.close()
    for line in lines:
        print(line, file=sys.stderr)
    return app.return_code or 0


def run_app(feed: Any, record: str | None = None, sweep: str | None = None, **kw: Any) -> int:
    """Run the UI over a feed; log lines go to memory while the screen is up, then to stderr."""
    from monitor.tui.app import HeadroomApp
    from monitor.tui.logtail import captured_logs

    app = HeadroomApp(feed, record_path=record, sweep_path=sweep, **kw)
    with captured_logs() as lines:
        try:
            if record:
                feed.start_recording(record)
            app.run()
        finally:
            feed.close()
    for line in lines:
        print(line, file=sys.stderr)
    return app.return_code or 0
