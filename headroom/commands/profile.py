"""`headroom profile`: drive vLLM's own torch profiler for a few seconds and summarise its trace."""

from __future__ import annotations

import argparse
import json

HELP = "run vLLM's torch profiler for a few seconds and summarise the trace"
DESCRIPTION = """\
POST /start_profile to a vLLM server, wait --seconds, POST /stop_profile, read the trace it
writes (torch_profiler_dir, found from the local server's command line or --trace-dir) and
print the top kernels (CPU ops on a CPU engine) by time, kernels per engine step, the median
kernel duration and the share of a step with no kernel running. Or summarise a trace file
you have (--trace FILE). vLLM must have been started with its profiler on; profiling slows
the engine while it runs.
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("profile", help=HELP, description=DESCRIPTION)
    p.add_argument("--vllm", metavar="URL", help="the vLLM server (base URL)")
    p.add_argument("--seconds", type=float, default=5.0, help="how long to profile (default 5)")
    p.add_argument("--trace-dir", metavar="DIR", help="where vLLM writes its traces")
    p.add_argument("--trace", metavar="FILE", action="append", default=[], help="summarise FILE")
    p.add_argument("--top", type=int, default=10, help="kernels or ops to list (default 10)")
    p.add_argument("--timeout", type=float, default=180.0, help="HTTP timeout (default 180 s)")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    from monitor.core.errors import ConfigError
    from monitor.profiling import trace as tr
    from monitor.profiling.pyspy import ProfileError
    from monitor.profiling.vllm_profiler import run_profile

    if bool(args.vllm) == bool(args.trace):
        raise ConfigError("give --vllm URL (profile it now) or --trace FILE (summarise a trace)")
    if args.top < 1:
        raise ConfigError("--top must be at least 1")
    paths = list(args.trace)
    if args.vllm:
        paths = [str(p) for p in run_profile(args.vllm, args.seconds, args.trace_dir, args.timeout)]
    summaries = []
    skipped = []
    for path in paths:
        try:
            summaries.append(tr.summarise(path, top=args.top))
        except ProfileError as exc:
            if len(paths) == 1:
                raise
            skipped.append(str(exc))  # the API server's trace has no ops of its own: say so
    if not summaries:
        raise ProfileError(skipped[0] if skipped else "no trace to summarise")
    if args.json:
        print(
            json.dumps({"traces": [s.to_json() for s in summaries], "skipped": skipped}, indent=2)
        )
    else:
        print("\n\n".join(tr.render(s) for s in summaries))
        for line in skipped:
            print(f"skipped: {line}")
    return 0
