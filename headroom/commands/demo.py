"""`headroom demo`: start the simulator and watch it; a key switches scenario, so every cause shows in a minute."""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from headroom.commands.common import add_price_flag, gpu_hour_price
from monitor.core.errors import ConfigError, HeadroomError

DEFAULT_SCENARIO = "starved"
MAX_WINDOW_S = 60.0


HELP = "watch a simulated serving box; press s to switch scenario"
DESCRIPTION = """\
Start the built-in simulator (a fake vLLM and a fake dcgm-exporter with load) and watch it.
Press s for the next scenario or 1-9 to pick one, ? for help, q to quit. Nothing leaves this
machine.
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help=HELP, description=DESCRIPTION)
    p.add_argument("--scenario", default=DEFAULT_SCENARIO, help="scenario to start with")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between readings")
    p.add_argument(
        "--window",
        type=float,
        default=5.0,
        help="seconds each diagnosis looks back (default 5; widens by itself, up to "
        f"{MAX_WINDOW_S:.0f} s, when a scenario's requests outlast it)",
    )
    p.add_argument("--record", metavar="FILE", help="record the session to FILE (JSONL)")
    add_price_flag(p)


class SimScenarios:
    """The demo's scenario switch: the simulator's handle behind the app's ScenarioControl."""

    def __init__(
        self,
        handle: Any,
        names: Sequence[str],
        current: str,
        on_switch: Callable[[], None] | None = None,
    ) -> None:
        self.handle = handle
        self.names = tuple(names)
        self.current = current
        self.on_switch = on_switch
        self._lock = threading.Lock()

    def set(self, name: str) -> None:
        with self._lock:
            self.handle.set_scenario(name)
            self.current = name
            if self.on_switch is not None:
                self.on_switch()


def sweep_command(handle: Any) -> list[str]:
    """A short sweep against the simulator (its own load keeps running beside it)."""
    return [
        sys.executable, "-m", "headroom", "sweep",
        "--target", handle.url,
        "--dcgm-exporter", handle.gpu_metrics_url,
        "--concurrency", "1,2,4,8,16,32,64",
        "--step-seconds", "5", "--warmup-seconds", "2",
        "--output-tokens", "64", "--quiet",
        "--out", "{out}",
    ]  # fmt: skip


def new_sweep_dir() -> Path:
    """A folder for one demo sweep, under the user's state directory (not /tmp)."""
    from monitor.core.paths import new_state_path

    return new_state_path("sweeps", "demo")


def run(args: argparse.Namespace) -> int:
    from headroom.commands.watch import run_app
    from monitor.diagnosis import Diagnoser
    from monitor.read.sampler import Sampler
    from monitor.sources.dcgm_exporter import DcgmExporterSource
    from monitor.sources.host import HostSource
    from monitor.sources.vllm import VllmSource
    from monitor.tui.feeds import LocalFeed
    from monitor.tui.sweep import SweepLauncher
    from monitor.watch.pipeline import Monitor
    from simulator import SCENARIOS, start_sim

    names = list(SCENARIOS)
    if args.scenario not in names:
        raise ConfigError(f"unknown scenario {args.scenario!r}; choose from {', '.join(names)}")
    if args.interval <= 0 or args.window <= 0:
        raise ConfigError("--interval and --window must be positive")
    price = gpu_hour_price(args)
    try:
        handle = start_sim(scenario=args.scenario, port=0, load=True)
    except HeadroomError:
        raise
    except Exception as exc:  # the simulator's own errors become one line
        raise HeadroomError(f"could not start the simulator: {exc}") from exc
    try:
        engine = VllmSource(handle.metrics_url)
        sources = [
            engine,
            DcgmExporterSource(handle.gpu_metrics_url),
            HostSource(pids=(handle.pid,)),
        ]
        sampler = Sampler(sources, interval=args.interval)
        monitor = Monitor(
            sampler,
            Diagnoser(gpu_hour_price=price),
            window_s=args.window,
            notes=("simulated box: headroom demo",),
            max_window_s=max(args.window, MAX_WINDOW_S),
        )
        feed = LocalFeed(monitor, label="simulator", header={"scenario": args.scenario})

        def switched() -> None:
            # Another box now: ask its caps again; windows, verdicts and caps start afresh.
            engine.config.forget()
            monitor.restart(args.window)

        scenarios = SimScenarios(handle, names, args.scenario, on_switch=switched)
        launcher = SweepLauncher(sweep_command(handle), new_sweep_dir)
        return run_app(
            feed,
            record=args.record,
            scenarios=scenarios,
            sweep_launcher=launcher,
            title="headroom demo",
        )
    finally:
        handle.stop()
