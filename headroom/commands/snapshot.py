"""`headroom snapshot`: sample every source for a window and print one reading with verdicts."""

from __future__ import annotations

import argparse
import json
import sys

from headroom.commands.common import (
    add_diagnosis_flags,
    add_source_flags,
    build_diagnoser_from_args,
    build_sources_from_args,
)
from monitor.errors import ConfigError, NoDataError
from monitor.report import error_line, render_text


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "snapshot",
        help="one reading of GPUs, engines and host, with the diagnosis",
        description=(
            "Sample every source for --window seconds, then print the window's figures and "
            "the diagnosis. Exits 1 only when no GPU or engine source produced data."
        ),
    )
    add_source_flags(p)
    add_diagnosis_flags(p)
    p.add_argument("--window", type=float, default=2.0, help="seconds to sample (default 2)")
    p.add_argument(
        "--interval",
        type=float,
        help="seconds between readings (default: a quarter of the window, at most 1)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    from monitor.pipeline import Monitor
    from monitor.sampler import Sampler

    if args.window <= 0:
        raise ConfigError("--window must be positive")
    interval = args.interval if args.interval is not None else min(1.0, args.window / 4)
    if interval <= 0:
        raise ConfigError("--interval must be positive")
    diagnoser = build_diagnoser_from_args(args)
    sources, notes = build_sources_from_args(args)
    if args.json:  # in text mode the notes are printed with the table
        for note in notes:
            print(f"headroom snapshot: {note}", file=sys.stderr)
    if not sources:
        raise NoDataError(
            "no source to read: give --vllm URL or --dcgm-exporter URL, or run where NVML works"
        )
    sampler = Sampler(sources, interval=interval, capacity=10_000)
    monitor = Monitor(sampler, diagnoser, window_s=args.window, notes=tuple(notes))
    try:
        sampler.run(duration=args.window)
    finally:
        sampler.close()
    report = monitor.report()
    assert report is not None  # run() ticks at least once
    no_data = not report["gpus"] and not report["engines"]
    # Each source's error goes to stderr once (scripts read the reason there, whatever the
    # format); text mode also shows the last tick's in the table. With no data at all, the
    # one closing line says it, reasons included.
    shown: set[tuple[str, str]] = set()
    for snap in () if no_data else sampler.snapshots():
        for err in snap.errors:
            if (err.source, err.target) not in shown:
                shown.add((err.source, err.target))
                line = error_line(
                    {"source": err.source, "target": err.target, "message": err.message}
                )
                print(f"headroom snapshot: {line}", file=sys.stderr)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(render_text(report))
    if no_data:
        why = "; ".join(error_line(e) for e in report["errors"][:3])
        print(
            "headroom snapshot: no GPU or engine source produced data"
            + (f" ({why})" if why else ""),
            file=sys.stderr,
        )
        return 1
    return 0
