"""`headroom`: one command, nine subcommands. Parses flags and wires the parts.

Each subcommand lives in ``headroom/commands/<name>.py`` with ``add_parser`` and
``run``; a command's heavy imports (the simulator, the load generator, Textual)
happen inside its ``run`` so `headroom --help` stays fast and light.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from monitor.core.errors import HeadroomError

COMMANDS = ("demo", "watch", "snapshot", "agent", "sim", "sweep", "tune", "profile", "fleet")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="headroom",
        description="Why is my GPU under-used, and how much more load can this serving box take?",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug detail to stderr")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMANDS:
        module = importlib.import_module(f"headroom.commands.{name}")
        module.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    module = importlib.import_module(f"headroom.commands.{args.command}")
    try:
        return int(module.run(args) or 0)
    except HeadroomError as exc:
        print(f"headroom {args.command}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
