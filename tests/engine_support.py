"""What the real-engine tests (tests/vllm, tests/llamacpp) share: the deploy/ helper that
serves an engine, loaded by path; skipping where the engine cannot be had (failing under CI
unless allowed); the CLI as a user runs it; `headroom snapshot --json` against a server.

A uniquely named module (not conftest) so that test modules import it unambiguously when
the whole suite is collected in one run.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]


def load_serve(folder: str) -> ModuleType:
    """deploy/<folder>/serve.py, loaded by path as a user may (deploy/ is no package)."""
    name = f"headroom_{folder.replace('-', '_')}_serve"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "deploy" / folder / "serve.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def skip_or_fail(reason: str, allow_skip_env: str) -> None:
    """Skip where the engine cannot be had; under CI fail, unless ``allow_skip_env`` is 1."""
    in_ci = os.environ.get("CI", "").lower() in ("1", "true", "yes")
    if in_ci and os.environ.get(allow_skip_env) != "1":
        pytest.fail(f"{reason} (CI=true: set {allow_skip_env}=1 to skip instead)")
    pytest.skip(reason)


def headroom(
    *args: str, timeout: float = 180.0, prefix: Sequence[str] = ()
) -> subprocess.CompletedProcess[str]:
    """Run the headroom CLI as a user would, with this test run's interpreter (under
    ``prefix``, e.g. ``taskset -c 1``)."""
    return subprocess.run(
        [*prefix, sys.executable, "-m", "headroom", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


def snapshot(url: str, window: float, *extra: str, interval: float = 0.25) -> dict[str, Any]:
    """`headroom snapshot --json` against a real server (no NVML: this machine has no GPU).

    Readings every 0.25 s rather than the default 1 s: on this busy 2-core box an odd reading
    lands between steps, and with only 8 readings one such reading weighs 12%.
    """
    proc = headroom(
        "snapshot", "--vllm", url, "--no-nvml", "--window", str(window),
        "--interval", str(interval), "--json", *extra,
    )  # fmt: skip
    assert proc.returncode == 0, f"snapshot exited {proc.returncode}: {proc.stderr}"
    return json.loads(proc.stdout)
