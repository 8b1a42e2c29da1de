"""The diagnosis on a real vLLM (CPU build): seq-cap, kv-cap and starved, from engine data alone.

This box has no GPU, so every verdict here is reached without GPU readings: the tests also check
that the diagnosis says what it lacked rather than pretending to have seen a GPU.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from vllm_load import Load
from vllm_support import SEQ_CAP, snapshot

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(900)]


def _top(report: dict[str, Any]) -> dict[str, Any]:
    assert report["verdicts"], f"no verdict: {report}"
    return report["verdicts"][0]


def _brief(report: dict[str, Any]) -> str:
    """What a failed assertion should show: every verdict and the engine's figures."""
    e = report["engines"][0] if report["engines"] else {}
    keys = ("running", "running_max", "waiting", "waiting_max", "kv_cache_usage_max",
            "preemptions_per_s", "samples")  # fmt: skip
    verdicts = [(v["cause"], v["confidence"], v["missing"]) for v in report["verdicts"]]
    figures = {k: e.get(k) for k in keys}
    return f"verdicts {verdicts}; engine {figures}; analysis {e.get('analysis')}"


def _evidence(verdict: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e["value"] for e in verdict["evidence"]}


def _says_gpu_missing(verdict: dict[str, Any]) -> bool:
    """The verdict names the GPU as a source it lacked, and is less sure for it."""
    return "gpu" in verdict["missing"] and verdict["confidence"] < 0.9


def test_twelve_streams_on_four_slots_is_seq_cap_with_the_servers_own_cap(
    seq_cap_server: Any,
) -> None:
    with Load(seq_cap_server.url, concurrency=3 * SEQ_CAP, max_tokens=200) as load:
        time.sleep(3)
        # No --max-num-seqs given to headroom, and vLLM exports none: headroom reads it
        # from the command line of the server listening on the port (/server_info is 404
        # without VLLM_SERVER_DEV_MODE).
        report = snapshot(seq_cap_server.url, 8)
    assert load.stats.errors == []

    verdict = _top(report)
    assert verdict["cause"] == "seq-cap", _brief(report)
    analysis = report["engines"][0]["analysis"]
    assert analysis["seq_cap"] == SEQ_CAP
    assert (analysis["seq_cap_origin"], analysis["seq_cap_reported_by"]) == ("reported", "cmdline")
    assert "set on the engine's command line" in verdict["summary"]
    assert "--max-num-seqs" in verdict["fix"]
    assert _evidence(verdict)  # the numbers that decided it are shown
    assert _says_gpu_missing(verdict), verdict["missing"]


def test_one_request_at_a_time_is_starved_with_the_fill_rate(seq_cap_server: Any) -> None:
    with Load(seq_cap_server.url, concurrency=1, max_tokens=200) as load:
        time.sleep(2)
        # One stream cannot reveal the cap, so the user states it, as they would in production.
        report = snapshot(seq_cap_server.url, 8, "--max-num-seqs", str(SEQ_CAP))
    assert load.stats.errors == []
    assert load.stats.completed >= 5

    verdict = _top(report)
    assert verdict["cause"] == "starved", _brief(report)
    e = report["engines"][0]
    assert e["waiting_max"] == 0
    assert e["running_max"] == 1
    # Little's law: filling 4 slots with requests lasting W s takes 4 / W req/s.
    fill = report["engines"][0]["analysis"]["fill_rate_rps"]
    expected = SEQ_CAP / load.stats.mean_latency_s()
    assert 0.6 * expected < fill < 1.6 * expected, (fill, expected)
    assert _says_gpu_missing(verdict), verdict["missing"]


# Last in the module: its server (module-scoped) stops as soon as this test ends.
def test_too_small_kv_cache_is_kv_cap_with_preemptions(kv_cap_server: Any) -> None:
    # 16 streams of 700 tokens need ~11,000 tokens of KV; the server has 1,280.
    with Load(kv_cap_server.url, concurrency=16, max_tokens=700) as load:
        time.sleep(4)
        report = snapshot(kv_cap_server.url, 8)
    # Preempted requests are recomputed, not failed: the client sees no error.
    assert load.stats.errors == []

    e = report["engines"][0]
    assert e["kv_cache_usage_max"] >= 0.9
    assert e["preemptions_per_s"] > 0
    verdict = _top(report)
    assert verdict["cause"] == "kv-cap", _brief(report)
    # KV pressure is read from the engine alone: the verdict stands without GPU data, and
    # cites no GPU figure it did not have.
    assert report["gpus"] == []
    assert not any(ev["name"].startswith("gpu") for ev in verdict["evidence"]), verdict
