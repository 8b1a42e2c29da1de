"""What machine a benchmark ran on, for the header of its committed results."""

from __future__ import annotations

import os
import platform
from collections.abc import Iterable
from pathlib import Path

import psutil


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def describe() -> str:
    """'N cores, <CPU model>, Python X.Y.Z'."""
    return f"{os.cpu_count()} cores, {cpu_model()}, Python {platform.python_version()}"


def tree_cpu(p: psutil.Process) -> float:
    """utime + stime of a process and all its descendants, in seconds (gone ones skipped)."""
    total = 0.0
    for q in [p, *p.children(recursive=True)]:
        try:
            t = q.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


def write_results(out: str | Path, lines: Iterable[str]) -> None:
    """Write a benchmark's result lines to ``out`` (making its folder) and print them."""
    text = "\n".join(lines) + "\n"
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    print(text)
