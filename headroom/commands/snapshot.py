"""`headroom snapshot`: sample every source for a window and print one reading with verdicts."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from headroom.commands.common import (
    add_diagnosis_flags,
    add_source_flags,
    build_diagnoser_from_args,
    build_sources_from_args,
)
from monitor.core.errors import ConfigError, NoDataError
from monitor.watch.report import error_line, render_text

HELP = "one reading of GPUs, engines and host, with the diagnosis"
DESCRIPTION = """\
Sample every source for --window seconds, then print the window's figures and the diagnosis.
Exits 1 only when no GPU or engine source produced data.
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("snapshot", help=HELP, description=DESCRIPTION)
    add_source_flags(p)
    add_diagnosis_flags(p)
    p.add_argument("--window", type=float, default=2.0, help="seconds to sample (default 2)")
    p.add_argument(
        "--interval",
        type=float,
        help="seconds between readings (default: a quarter of the window, at most 1)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--profile",
        action="store_true",
        help="also sample the Python stacks of the engine's processes over the window (py-spy, "
        "non-blocking: the engine is never paused) and name its hot thread's top functions",
    )
    p.add_argument(
        "--target-rate",
        type=float,
        metavar="RPS",
        help="also say how many boxes like this one serve RPS requests/s (from each engine's "
        "rate at its first limit, the headroom figure)",
    )
    p.add_argument(
        "--slo",
        action="append",
        default=[],
        metavar="METRIC_PCT=SECONDS",
        help="with --target-rate: a latency each box must keep (ttft, itl or e2e at p50 or "
        "p95, e.g. itl_p95=0.05); repeat for several",
    )
    p.add_argument(
        "--remote",
        metavar="AGENT_URL",
        help="print a running agent's latest report (its /api/v1/snapshot) instead of sampling: "
        "what it has learned over time comes with it (held verdicts, caps seen under load, the "
        "step cost its what-if prices changes with)",
    )
    p.add_argument(
        "--profile-rate",
        type=int,
        default=50,
        metavar="HZ",
        help="py-spy samples a second with --profile (default 50)",
    )


def run(args: argparse.Namespace) -> int:
    from monitor.read.sampler import Sampler
    from monitor.watch.pipeline import Monitor

    if args.remote:
        slos = _slos(args)  # a bad flag is told before the agent is asked
        return _print(args, _remote_report(args.remote, args.timeout), slos)
    if args.window <= 0:
        raise ConfigError("--window must be positive")
    interval = args.interval if args.interval is not None else min(1.0, args.window / 4)
    if interval <= 0:
        raise ConfigError("--interval must be positive")
    slos = _slos(args)
    diagnoser = build_diagnoser_from_args(args)
    sources, notes = build_sources_from_args(args, one_shot=True)
    if args.json:  # in text mode the notes are printed with the table
        for note in notes:
            print(f"headroom snapshot: {note}", file=sys.stderr)
    if not sources:
        raise NoDataError(
            "no source to read: give --vllm URL or --dcgm-exporter URL, or run where NVML works"
        )
    sampler = Sampler(sources, interval=interval, capacity=10_000)
    monitor = Monitor(sampler, diagnoser, window_s=args.window, notes=tuple(notes))
    recording = None
    try:
        if args.profile:
            recording = _start_profile(args, sources)
        sampler.run(duration=args.window)
        if recording is not None:
            _finish_profile(recording, monitor)
            recording = None
    finally:
        if recording is not None:
            recording.cancel()
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
    _print(args, report, slos, shown=not no_data)
    if no_data:
        why = "; ".join(error_line(e) for e in report["errors"][:3])
        print(
            "headroom snapshot: no GPU or engine source produced data"
            + (f" ({why})" if why else ""),
            file=sys.stderr,
        )
        return 1
    return 0


def _print(
    args: argparse.Namespace, report: dict[str, Any], slos: dict[str, float], shown: bool = True
) -> int:
    """The report as JSON or a table, with the capacity for --target-rate."""
    if args.target_rate is not None:
        from monitor.diagnosis.capacity import capacity

        report["capacity"] = capacity(report, args.target_rate, slos)
    if args.json:
        print(json.dumps(report, indent=2))
    elif shown:
        # With nothing read, an empty table says nothing the closing line does not.
        print(render_text(report))
        if args.target_rate is not None:
            from monitor.diagnosis.capacity import capacity_text

            print(capacity_text(report["capacity"]))
    return 0


def _remote_report(agent_url: str, timeout: float) -> dict[str, Any]:
    """A running agent's latest report (monitor.fleet.agents.read_report: one line where it
    cannot be read)."""
    import httpx

    from monitor.fleet.agents import read_report, snapshot_url

    with httpx.Client(timeout=timeout) as client:
        return read_report(client, snapshot_url(agent_url))


def _slos(args: argparse.Namespace) -> dict[str, float]:
    """--slo and --target-rate checked before any sampling: a bad one is one line, exit 1."""
    if args.slo and args.target_rate is None:
        raise ConfigError("--slo needs --target-rate (the SLOs bound each box's rate)")
    if args.target_rate is not None and not args.target_rate > 0:
        raise ConfigError("--target-rate must be a positive requests/s")
    if not args.slo:
        return {}
    from loadgen.analysis import parse_slo
    from monitor.diagnosis.capacity import check_slos

    slos = dict(parse_slo(text) for text in args.slo)
    check_slos(slos)
    return slos


def _profile_target(args: argparse.Namespace, sources: list) -> tuple[int, bool]:  # type: ignore[type-arg]
    """(pid, follow its children): --pid with its children, else the engine's process that
    burns the most CPU over half a second. One process costs py-spy a third of what the
    whole tree does (an API server, an engine core, a worker: bench/profile_cost.py)."""
    from monitor.profiling.pyspy import ProfileError

    if args.pid:
        return int(args.pid[0]), True
    host = next((s for s in sources if getattr(s, "name", "") == "host"), None)
    pids = sorted(host.tracked_pids) if host is not None else []
    if not pids:
        raise ProfileError(
            "--profile needs the engine's process: a --vllm URL on this host, or --pid PID"
        )
    import time

    import psutil

    def cpu(pid: int) -> float:
        try:
            t = psutil.Process(pid).cpu_times()
            return t.user + t.system
        except psutil.Error:
            return -1.0

    before = {pid: cpu(pid) for pid in pids}
    time.sleep(0.5)
    used = {pid: cpu(pid) - before[pid] for pid in pids if before[pid] >= 0}
    busiest = max(used, key=lambda p: used[p], default=None)
    if busiest is None or used[busiest] < 0.05:  # all idle: the tree, to find what runs
        roots = [p for p in pids if _parent(p) not in pids]
        return (roots[0] if roots else pids[0]), True
    return busiest, False


def _parent(pid: int) -> int | None:
    import psutil

    try:
        return psutil.Process(pid).ppid()
    except psutil.Error:
        return None


def _start_profile(args: argparse.Namespace, sources: list) -> object:  # type: ignore[type-arg]
    from monitor.profiling import pyspy

    pid, tree = _profile_target(args, sources)
    return pyspy.start(pid, args.window, args.profile_rate, subprocesses=tree)


def _finish_profile(recording: object, monitor: object) -> None:
    from monitor.profiling import pyspy

    rec: pyspy.Recording = recording  # type: ignore[assignment]
    raw = rec.finish()
    window = monitor.window()  # type: ignore[attr-defined]
    host = window.host if window is not None else None
    busiest = host.busiest_thread if host is not None else None
    tid = busiest.tid if busiest is not None else None
    name = busiest.name if busiest is not None else ""
    prof = pyspy.build_profile(
        raw,
        rec.pid,
        rec.seconds,
        rec.rate,
        want_tid=tid,
        thread_name=name,
        notes_in=tuple(rec.notes),
    )
    monitor.set_cpu_profile(prof)  # type: ignore[attr-defined]
    monitor.refresh()  # type: ignore[attr-defined]
