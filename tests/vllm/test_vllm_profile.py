"""Which code, on a real vLLM (CPU build): the engine-core thread's top functions are vLLM's."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from vllm_load import Load
from vllm_support import SEQ_CAP, headroom, snapshot

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(900)]


def test_the_engine_core_threads_top_functions_live_in_vllm(seq_cap_server: Any) -> None:
    # Four streams fill the four slots: the engine core steps back to back, its thread the limit.
    with Load(seq_cap_server.url, concurrency=SEQ_CAP, max_tokens=300) as load:
        time.sleep(2)
        report = snapshot(seq_cap_server.url, 5, "--profile")
    assert load.stats.errors == []
    prof = report["engines"][0]["cpu_profile"]
    assert prof is not None and prof["samples"] >= 50, prof
    busiest = report["host"]["busiest_thread"]
    # The thread profiled is the main thread of one of vLLM's engine processes: 0.32 on CPU
    # runs the model in VLLM::Worker, a child of VLLM::EngineCore, and both spin near a full
    # core, so either may be the busiest over the half second snapshot measures to choose.
    assert busiest["name"].startswith("VLLM::"), busiest
    assert prof["thread"].startswith("VLLM::"), (prof["thread"], busiest)
    # Its top frames, by time including callees, below the thread's own entry points, are
    # vLLM's: the engine loop, its scheduler, its model runner.
    vllm_frames = [f for f in prof["inclusive"] if f["file"].startswith("vllm/")]
    assert vllm_frames and vllm_frames[0]["total_share"] >= 0.5, prof["inclusive"]
    top_self = prof["functions"][:5]
    share_in_vllm = sum(f["self_share"] for f in top_self if f["file"].startswith("vllm/"))
    assert share_in_vllm > 0, top_self


@pytest.fixture
def profiler_server(seq_cap_server: Any) -> tuple[Any, Path]:
    """The shared server, started with vLLM's torch profiler on (conftest), and its trace
    directory."""
    return seq_cap_server, seq_cap_server.profiler_traces


def test_headroom_profile_drives_vllms_torch_profiler(profiler_server: Any) -> None:
    server, traces = profiler_server
    with Load(server.url, concurrency=SEQ_CAP, max_tokens=200) as load:
        time.sleep(2)
        # No --trace-dir: headroom reads it from the local server's command line. One second
        # records 90-130 engine steps here (2 s: 400-560), and vLLM's stop writes the trace
        # in a time that grows with what it recorded.
        proc = headroom("profile", "--vllm", server.url, "--seconds", "1", "--json", timeout=300)
    assert load.stats.errors == []
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    (worker,) = [t for t in out["traces"] if "async_llm" not in t["path"]]
    assert worker["path"].startswith(str(traces))
    # A CPU engine: CPU ops by their own time, one engine step per vLLM annotation.
    assert worker["kind"] == "cpu ops" and worker["steps"] >= 10, worker
    names = [o["name"] for o in worker["top"]]
    assert any(n.startswith(("aten::", "_C::", "vllm::")) for n in names), names
