"""Helpers for the real-vLLM integration tests: the server helper, the CLI, engine gauges.

A uniquely named module (not conftest) so that test modules import it unambiguously when
the whole suite, with other directories' conftest.py files, is collected in one run.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]

# The --max-num-seqs of the shared server; tests state loads in terms of it.
SEQ_CAP = 4
# 10 blocks = 1,280 tokens on the CPU build; vLLM refuses fewer with --max-model-len 1024.
KV_BLOCKS = 10


def _load_serve() -> ModuleType:
    # deploy/vllm-cpu is not a package (the hyphen): load it by path, as a user may.
    name = "headroom_vllm_serve"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "deploy" / "vllm-cpu" / "serve.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


serve = _load_serve()


def skip_or_fail(reason: str) -> None:
    """Skip where vllm-cpu cannot be installed; under CI fail, unless skipping is allowed."""
    in_ci = os.environ.get("CI", "").lower() in ("1", "true", "yes")
    if in_ci and os.environ.get("HEADROOM_ALLOW_VLLM_SKIP") != "1":
        pytest.fail(f"{reason} (CI=true: set HEADROOM_ALLOW_VLLM_SKIP=1 to skip instead)")
    pytest.skip(reason)


def engine_gauges(url: str) -> dict[str, float]:
    """The few vLLM gauges the fixtures need, read straight from /metrics (not through headroom)."""
    text = ""
    for attempt in range(2):  # a scrape on a reused connection was once dropped: retry once
        try:
            with urllib.request.urlopen(url + "/metrics", timeout=10) as resp:
                text = resp.read().decode()
            break
        except OSError:
            if attempt:
                raise
    out: dict[str, float] = {}
    for line in text.splitlines():
        for name in ("vllm:num_requests_running", "vllm:num_requests_waiting"):
            if line.startswith(name + "{"):
                out[name] = float(line.rsplit(" ", 1)[1])
    return out


def wait_idle(url: str, timeout: float = 90.0) -> None:
    """Wait until nothing runs or waits: what an earlier test left has drained."""
    deadline = time.monotonic() + timeout
    while True:
        g = engine_gauges(url)
        if g.get("vllm:num_requests_running") == 0 and g.get("vllm:num_requests_waiting") == 0:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"vLLM at {url} did not drain in {timeout:.0f} s: {g}")
        time.sleep(0.5)


def headroom(*args: str, timeout: float = 180.0) -> subprocess.CompletedProcess[str]:
    """Run the headroom CLI as a user would, with this test run's interpreter."""
    return subprocess.run(
        [sys.executable, "-m", "headroom", *args],
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
