"""Run the simulator in the foreground: shared by ``python -m simulator`` and ``headroom sim``."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence

from simulator.config import SimConfig, apply_overrides, read_file
from simulator.errors import SimConfigError, SimError
from simulator.otlp import check_endpoint
from simulator.scenarios import SCENARIOS, build

READY_PREFIX = "SIM_READY "


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--scenario",
        default=None,
        help=f"preset to run (default: the config file's, else idle): {', '.join(SCENARIOS)}",
    )
    parser.add_argument(
        "--listen", default="127.0.0.1:8000", help="HOST:PORT to serve on (port 0: any free one)"
    )
    parser.add_argument(
        "--no-load", action="store_true", help="no built-in load: an external generator drives it"
    )
    parser.add_argument(
        "--config", default=None, help="TOML or YAML file overriding the scenario's engine and load"
    )
    parser.add_argument(
        "--otlp-traces-endpoint",
        default=None,
        metavar="URL",
        help="POST each finished request's trace span there (OTLP/HTTP protobuf), as vLLM does",
    )
    add_engine_flags(parser)
    parser.add_argument("--list", action="store_true", help="list the scenarios and exit")
    # start_sim passes its own PID: a simulator whose caller died (a closed terminal,
    # a killed test) must not go on burning CPU.
    parser.add_argument("--exit-with-parent", type=int, default=None, help=argparse.SUPPRESS)


# Engine settings a launch command can give, as vLLM's flags of the same names (a tuner
# relaunches the box with one changed); each lies over the scenario and --config.
ENGINE_FLAGS = ("max_num_seqs", "num_blocks", "max_num_batched_tokens")


def add_engine_flags(parser: argparse.ArgumentParser) -> None:
    for name in ENGINE_FLAGS:
        parser.add_argument(
            "--" + name.replace("_", "-"),
            type=int,
            default=None,
            metavar="N",
            help=f"the engine's {name} (over the scenario's and --config's)",
        )


def with_engine_flags(cfg: SimConfig, args: argparse.Namespace) -> SimConfig:
    given = {n: getattr(args, n) for n in ENGINE_FLAGS if getattr(args, n, None) is not None}
    if not given:
        return cfg
    return apply_overrides(cfg, {"engine": given}, "flags")


def parse_listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise SimConfigError(f"--listen wants HOST:PORT, got {text!r}")
    return host.strip("[]"), int(port)


def resolve(scenario: str | None, config: str | None) -> SimConfig:
    """The config to run: a scenario, with a file's overrides on top."""
    data = read_file(config) if config else {}
    name = scenario or data.get("scenario") or "idle"
    if not isinstance(name, str):
        raise SimConfigError(f"config {config}: scenario must be a name")
    if not config:
        return build(name)
    return apply_overrides(build(name), data, f"config {config}")


def list_scenarios() -> str:
    width = max(len(n) for n in SCENARIOS)
    return "\n".join(f"{name:<{width}}  {s.summary}" for name, s in SCENARIOS.items())


async def _serve(
    cfg: SimConfig,
    host: str,
    port: int,
    load: bool,
    announce: Callable[[str], None],
    otlp_traces_endpoint: str | None,
) -> None:
    from simulator.server import start_server

    runner, engine, bound = await start_server(cfg, host, port, load, otlp_traces_endpoint)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (
            NotImplementedError,
            RuntimeError,
        ):  # pragma: no cover - not the main thread / Windows
            pass
    shown = f"[{host}]" if ":" in host else host
    announce(f"http://{shown}:{bound}")
    try:
        await stop.wait()
    finally:
        engine.stop()
        await runner.cleanup()


def serve(
    cfg: SimConfig,
    host: str,
    port: int,
    load: bool,
    announce: Callable[[str], None],
    otlp_traces_endpoint: str | None = None,
) -> None:
    """Serve until SIGINT or SIGTERM; ``announce`` gets the base URL once it is listening.

    ``otlp_traces_endpoint``: where finished requests' trace spans go (None: nowhere).
    """
    if otlp_traces_endpoint is not None:
        check_endpoint(otlp_traces_endpoint)
    try:
        asyncio.run(_serve(cfg, host, port, load, announce, otlp_traces_endpoint))
    except OSError as exc:
        raise SimError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


def _exit_with_parent(pid: int) -> None:
    def watch() -> None:
        while os.getppid() == pid:
            time.sleep(0.5)
        os._exit(0)  # nothing to save: the simulator keeps no state worth a clean shutdown

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m simulator", description="A simulated LLM serving box."
    )
    add_arguments(parser)
    args = parser.parse_args(argv)
    if args.list:
        print(list_scenarios())
        return 0
    if args.exit_with_parent is not None:
        _exit_with_parent(args.exit_with_parent)
    try:
        cfg = with_engine_flags(resolve(args.scenario, args.config), args)
        host, port = parse_listen(args.listen)

        def announce(url: str) -> None:
            print(f"{READY_PREFIX}{url} {cfg.scenario}", flush=True)

        serve(cfg, host, port, not args.no_load, announce, args.otlp_traces_endpoint)
    except SimError as exc:
        print(f"simulator: {exc}", file=sys.stderr)
        return 1
    return 0
