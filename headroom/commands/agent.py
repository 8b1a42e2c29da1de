"""`headroom agent`: sample continuously and serve /metrics, /healthz and /api/v1/snapshot."""

from __future__ import annotations

import argparse
import logging
import signal
import threading
from typing import Any

from headroom.commands.common import add_diagnosis_flags, add_engine_url_flag
from monitor.serve.config import DEFAULT_PORT

# Flags default to None so the config layers underneath (environment, file) show through.
_FLAG_FIELDS = (
    "listen", "vllm", "engine", "dcgm_exporter", "interval", "window", "timeout", "stale_after",
    "max_num_seqs", "max_num_batched_tokens", "gpu_model", "thresholds", "web_config",
    "pids", "nvml", "gpm", "dcgm", "host", "allow_profile", "profile_every", "profile_rate",
    "gpus", "diagnose_every", "gpu_hour_price", "gpu_energy_every",
)  # fmt: skip


HELP = "sample continuously; serve Prometheus metrics and the snapshot API"
DESCRIPTION = f"""\
Sample GPUs, engines and host every --interval seconds, diagnose each --window, and serve
/metrics (Prometheus), /healthz (200 while sampling is fresh, else 503) and /api/v1/snapshot
(the report JSON). Settings come from flags, then HEADROOM_* environment variables
(HEADROOM_LISTEN, HEADROOM_VLLM=url1,url2, HEADROOM_INTERVAL, ...), then --config FILE (YAML
or TOML), then defaults. Listens on 127.0.0.1:{DEFAULT_PORT}; give --listen
0.0.0.0:{DEFAULT_PORT} to let other hosts scrape it, ideally with --web-config for TLS and
basic auth.
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("agent", help=HELP, description=DESCRIPTION)
    p.add_argument("--config", metavar="FILE", help="YAML or TOML file of agent settings")
    p.add_argument("--listen", metavar="HOST:PORT", help=f"default 127.0.0.1:{DEFAULT_PORT}")
    p.add_argument(
        "--web-config",
        metavar="FILE",
        help="Prometheus web-config file: tls_server_config and basic_auth_users (bcrypt)",
    )
    g = p.add_argument_group("sources")
    add_engine_url_flag(g, default=None)
    g.add_argument("--dcgm-exporter", metavar="URL", help="a dcgm-exporter /metrics endpoint")
    g.add_argument("--no-nvml", dest="nvml", action="store_const", const=False, help="skip NVML")
    g.add_argument(
        "--no-gpm", dest="gpm", action="store_const", const=False, help="NVML without GPM"
    )
    g.add_argument("--dcgm", action="store_const", const=True, help="read GPUs through pydcgm")
    g.add_argument(
        "--gpu",
        dest="gpus",
        type=int,
        action="append",
        metavar="INDEX",
        help="watch only this GPU (NVML's index; repeat for several; default: every GPU)",
    )
    g.add_argument(
        "--no-host", dest="host", action="store_const", const=False, help="skip host CPU"
    )
    g.add_argument(
        "--pid", dest="pids", type=int, action="append", help="an engine process to watch"
    )
    g.add_argument(
        "--timeout", type=float, help="HTTP timeout per source read in seconds (default 2)"
    )
    g = p.add_argument_group("profiling")
    g.add_argument(
        "--allow-profile",
        action="store_const",
        const=True,
        help="serve POST /api/v1/profile?seconds=S (py-spy on the engine's hot thread, "
        "behind the same auth as the rest)",
    )
    g.add_argument(
        "--profile-every",
        type=float,
        metavar="S",
        help="while cpu-bound holds, profile the engine's hot thread by itself at most every "
        "S seconds per process (default 300; 0 = never)",
    )
    g.add_argument("--profile-rate", type=int, metavar="HZ", help="py-spy samples a second (20)")
    g = p.add_argument_group("timing")
    g.add_argument(
        "--interval", type=float, metavar="S", help="seconds between readings (default 1)"
    )
    g.add_argument(
        "--window", type=float, metavar="S", help="diagnosis window in seconds (default 10)"
    )
    g.add_argument(
        "--diagnose-every",
        type=float,
        metavar="S",
        help="seconds between the steps a verdict's hold counts (default 5, at most the "
        "window); each read (a scrape, /api/v1/snapshot) still judges the latest reading",
    )
    g.add_argument(
        "--stale-after",
        type=float,
        metavar="S",
        help="/healthz turns 503 after this long without a tick (default 3 intervals + 5 s)",
    )
    g = add_diagnosis_flags(p)
    g.add_argument(
        "--gpu-energy-every",
        type=float,
        metavar="S",
        help="seconds between reads of NVML's energy counter (default 30; power is integrated "
        "between; 0 = power alone)",
    )


def flags_from_args(args: argparse.Namespace) -> dict[str, Any]:
    from monitor.diagnosis.energy import parse_price

    flags = {name: getattr(args, name, None) for name in _FLAG_FIELDS}
    # Checked here, not by argparse: a bad price is one line and exit 1, as in the config.
    flags["gpu_hour_price"] = parse_price(flags["gpu_hour_price"])
    return flags


def run(args: argparse.Namespace) -> int:
    from monitor.serve.agent import Agent
    from monitor.serve.config import load_agent_config
    from monitor.serve.malloc_arenas import limit_malloc_arenas

    # Before any thread starts: a daemon's RSS must not creep over days (see the module).
    limit_malloc_arenas()
    config = load_agent_config(args.config, flags_from_args(args))
    # The agent is a daemon: its events are INFO lines even without --verbose.
    for name in ("monitor", "headroom"):
        logger = logging.getLogger(name)
        if logger.getEffectiveLevel() > logging.INFO:
            logger.setLevel(logging.INFO)
    log = logging.getLogger("headroom.agent")
    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        log.info("received %s, stopping", signal.Signals(signum).name)
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        agent = Agent(config)
        agent.start()
        try:
            while not stop.wait(1.0):
                pass
        finally:
            agent.stop()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    return 0
