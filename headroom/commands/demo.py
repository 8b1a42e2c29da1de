"""`headroom demo`: placeholder until its issue lands (owned by that issue's module)."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    sub.add_parser("demo", help="(not built yet)")


def run(args: argparse.Namespace) -> int:
    raise SystemExit("headroom demo: not built yet")
