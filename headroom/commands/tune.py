"""`headroom tune`: launch the engine, sweep, follow the cause's knob, relaunch (or --grid)."""

from __future__ import annotations

import argparse
from pathlib import Path

from headroom.commands.common import add_raw_parser
from monitor.core.errors import ConfigError

EPILOG = """\
examples:
  headroom tune --launch 'python -m headroom sim --scenario seq-cap --no-load \\
      --listen 127.0.0.1:{port} --max-num-seqs {max_num_seqs}' \\
      --target http://127.0.0.1:{port} --dcgm-exporter http://127.0.0.1:{port}/gpu/metrics \\
      --knob max_num_seqs=8:256 --step-seconds 3 --warmup-seconds 1 --out tune1
  headroom tune --launch 'vllm serve MODEL --port 8000 --max-num-seqs {max_num_seqs}' \\
      --target http://127.0.0.1:8000 --knob max_num_seqs=8,16,32,64 --grid --out grid1

{NAME} in --launch (and --target, --dcgm-exporter) is the run's value of --knob NAME;
{port} is a free port the tune picks for each run.
"""

# The sweep's flags a tune passes on to each run's sweep (its defaults otherwise).
SWEEP_FLAGS = ("model", "api", "max_concurrency", "start_concurrency", "refine_steps",
               "step_seconds", "warmup_seconds", "input_tokens", "output_tokens",
               "sample_interval", "request_timeout", "engine", "seed")  # fmt: skip


HELP = "launch the engine, sweep it, change the knob the cause names, relaunch"
DESCRIPTION = (
    "Launch the engine from a command template, sweep it to its knee, take "
    "the monitor's what-if for the knob the knee's cause names, relaunch with the "
    "predicted value, and stop when the next change is predicted to gain under 5%, the "
    "cause has no knob given, the SLO binds or a bound is reached. --grid runs every "
    "combination instead (as vLLM's auto_tune), to compare."
)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = add_raw_parser(sub, "tune", HELP, DESCRIPTION, EPILOG)
    p.add_argument("--launch", required=True, metavar="CMD",
                   help="the engine's launch command, with {KNOB} placeholders (and {port})")  # fmt: skip
    p.add_argument("--target", required=True, metavar="URL",
                   help="the base URL the launched engine serves (its /v1 and /metrics)")  # fmt: skip
    p.add_argument("--knob", action="append", default=[], metavar="NAME=START:BOUND",
                   help="a knob to vary from START up to BOUND (repeatable); with --grid "
                   "NAME=V1,V2,...")  # fmt: skip
    p.add_argument("--grid", action="store_true",
                   help="run every combination of the --knob values (brute force)")  # fmt: skip
    p.add_argument("--slo", action="append", default=[], metavar="METRIC_PCT=S[,...]",
                   help="e.g. ttft_p99=0.5,itl_p99=0.05: runs are ranked by throughput at the SLO")  # fmt: skip
    p.add_argument("--max-runs", metavar="N", help="at most N launches")
    p.add_argument("--start-timeout", default="600", metavar="S",
                   help="seconds an engine may take to answer (default 600)")  # fmt: skip
    p.add_argument(
        "--dcgm-exporter", metavar="URL", help="a dcgm-exporter /metrics (may hold {port})"
    )
    p.add_argument("--nvml", action="store_true", help="also read this host's GPUs through NVML")
    for dest in SWEEP_FLAGS:
        p.add_argument("--" + dest.replace("_", "-"), help="as for headroom sweep")
    p.add_argument("--resume", action="store_true", help="continue the tune in OUT from tune.json")
    p.add_argument("--quiet", action="store_true", help="no progress display")
    p.add_argument("--out", required=True, metavar="DIR", help="output directory")


def _sweep_args(args: argparse.Namespace) -> argparse.Namespace:
    """The sweep's own flags, parsed and checked by its parser, for each run's sweep."""
    from headroom.commands import sweep

    parser = argparse.ArgumentParser(prog="headroom tune", add_help=False)
    sweep.add_parser(parser.add_subparsers(dest="command"))
    argv = ["sweep", "--target", "http://127.0.0.1", "--out", args.out, "--quiet"]
    for dest in SWEEP_FLAGS:
        value = getattr(args, dest)
        if value is not None:
            argv += ["--" + dest.replace("_", "-"), value]
    for slo in args.slo:
        argv += ["--slo", slo]
    ns = parser.parse_args(argv)
    sweep.read_numbers(ns)
    return ns


def _read_int(flag: str, text: str | None) -> int | None:
    if text is None:
        return None
    if not text.strip().isdigit() or int(text) < 1:
        raise ConfigError(f"{flag} {text}: want an integer, 1 or more")
    return int(text)


def run(args: argparse.Namespace) -> int:
    from headroom.commands.sweep import check_out_dir, config_from_args
    from loadgen.analysis import parse_slo
    from loadgen.preflight import resolve_model
    from loadgen.progress import Progress
    from loadgen.traffic import prepare
    from loadgen.tune import Tuner, TuneSpec, check_templates, sweep_runner
    from loadgen.tune_plan import parse_knobs

    knobs = parse_knobs(args.knob, args.grid)
    check_templates(args.launch, args.target, args.dcgm_exporter, knobs)
    args.slo = [s for text in args.slo for s in text.split(",") if s.strip()]
    slos = dict(parse_slo(s) for s in args.slo)
    max_runs = _read_int("--max-runs", args.max_runs)
    try:
        start_timeout = float(args.start_timeout)
    except ValueError:
        start_timeout = -1.0
    if not start_timeout > 0:
        raise ConfigError(f"--start-timeout {args.start_timeout}: want a number above 0")
    sweep_ns = _sweep_args(args)
    out = Path(args.out)
    check_out_dir(out)
    progress = Progress(quiet=args.quiet)

    def make_config(target: str, gpu: str | None):
        sweep_ns.dcgm_exporter = gpu
        model = resolve_model(target, sweep_ns.model)
        # Prompts of the asked length through the engine's /tokenize where it has one (vLLM),
        # as `headroom sweep` sends them; word-counted prompts ran ~3x long on vLLM.
        traffic = prepare(target, model, "chat" if sweep_ns.turns > 1 else sweep_ns.api, None,
                          None, out, seed=sweep_ns.seed)  # fmt: skip
        for w in traffic.warnings:
            progress.message(f"warning: {w}")
        return config_from_args(sweep_ns, model, target, traffic)

    spec = TuneSpec(launch=args.launch, target=args.target, knobs=knobs, grid=args.grid,
                    slos=slos, gpu_metrics=args.dcgm_exporter, max_runs=max_runs,
                    start_timeout_s=start_timeout)  # fmt: skip
    tuner = Tuner(spec, out, sweep_runner(make_config, progress, nvml=args.nvml), progress,
                  resume=args.resume)  # fmt: skip
    state = tuner.run()
    b = state.get("best")
    progress.message(f"stopped: {state.get('stopped')}")
    if b:
        said = ", ".join(f"{k} {v}" for k, v in b["knobs"].items())
        progress.message(
            f"best: run {b['run']} ({said}): {b['throughput_tok_s'] or 0:.1f} tok/s at concurrency "
            f"{b['saturation_concurrency']}"
        )
    progress.message(f"wrote {out / 'tune.json'} and tune.md ({len(state['runs'])} runs, "
                     f"{state['wall_s']:g} s)")  # fmt: skip
    return 0 if b else 1
