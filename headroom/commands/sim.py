"""`headroom sim`: run the simulated serving box in the foreground until Ctrl-C."""

from __future__ import annotations

import argparse
import sys

from monitor.core.errors import ConfigError, HeadroomError

HELP = "run a simulated vLLM box (OpenAI API, /metrics, /gpu/metrics) with a built-in load"
DESCRIPTION = """\
A simulated LLM serving box: a vLLM-like engine on a simulated GPU, serving an
OpenAI-compatible API, vLLM's /metrics and dcgm-exporter's /gpu/metrics. Each scenario is an
engine setting plus a built-in load that produces one story; point `headroom watch` at it
and watch the monitor explain it.
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sim", help=HELP, description=DESCRIPTION)
    # Spelled out here (not imported) so `headroom --help` never imports the simulator.
    p.add_argument(
        "--scenario",
        default=None,
        help="preset to run (default: the config file's, else idle); --list shows them",
    )
    p.add_argument(
        "--listen",
        default="127.0.0.1:8000",
        help="HOST:PORT to serve on (default 127.0.0.1:8000; port 0: any free one)",
    )
    p.add_argument(
        "--no-load",
        action="store_true",
        help="no built-in load: an external generator drives the box",
    )
    p.add_argument(
        "--config",
        default=None,
        help="TOML or YAML file overriding the scenario's [engine] and [load] keys",
    )
    p.add_argument(
        "--otlp-traces-endpoint",
        default=None,
        metavar="URL",
        help=(
            "POST each finished request's trace span there (OTLP/HTTP protobuf), as vLLM's flag "
            "of the same name does: its queue, prefill and first-token times"
        ),
    )
    for flag in ("--max-num-seqs", "--num-blocks", "--max-num-batched-tokens"):
        p.add_argument(flag, metavar="N",
                       help=f"the engine's {flag[2:].replace('-', '_')} (over the scenario's and "
                       "--config's)")  # fmt: skip
    p.add_argument("--list", action="store_true", help="list the scenarios and exit")


def run(args: argparse.Namespace) -> int:
    from simulator.cli import (
        ENGINE_FLAGS,
        list_scenarios,
        parse_listen,
        resolve,
        serve,
        with_engine_flags,
    )
    from simulator.errors import SimConfigError, SimError

    if args.list:
        print(list_scenarios())
        return 0
    try:
        for name in ENGINE_FLAGS:
            text = getattr(args, name)
            if text is not None:
                if not text.strip().isdigit() or int(text) < 1:
                    flag = "--" + name.replace("_", "-")
                    raise ConfigError(f"{flag} {text}: want an integer, 1 or more")
                setattr(args, name, int(text))
        cfg = with_engine_flags(resolve(args.scenario, args.config), args)
        host, port = parse_listen(args.listen)

        def announce(url: str) -> None:
            load = "no built-in load" if args.no_load else "built-in load on"
            print(f"headroom sim: scenario {cfg.scenario} ({load}) serving on {url}", flush=True)
            print(
                f"  OpenAI API {url}/v1   engine metrics {url}/metrics   GPU metrics {url}/gpu/metrics"
            )
            print(f"  {cfg.summary}" if cfg.summary else "", flush=True)
            print("  Ctrl-C to stop", file=sys.stderr, flush=True)

        serve(cfg, host, port, not args.no_load, announce, args.otlp_traces_endpoint)
    except SimConfigError as exc:
        raise ConfigError(str(exc)) from None
    except SimError as exc:
        raise HeadroomError(str(exc)) from None
    return 0
