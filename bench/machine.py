"""What machine a benchmark ran on, for the header of its committed results."""

from __future__ import annotations

import os
import platform
from pathlib import Path


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
