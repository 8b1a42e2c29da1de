"""Stopping a test's child process: asked to stop, then killed if it does not within grace.

A uniquely named module (not conftest): test modules and the folders' helpers import it
(the tests folder is on sys.path through tests/conftest.py).
"""

from __future__ import annotations

import subprocess
from typing import Any


def stop(proc: subprocess.Popen[Any], grace: float) -> None:
    """SIGTERM, up to grace seconds to exit, then SIGKILL (and its exit reaped)."""
    proc.terminate()
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)
