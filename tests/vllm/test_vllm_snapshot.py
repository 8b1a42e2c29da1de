"""`headroom snapshot` against a real vLLM (CPU build): idle, then under load."""

from __future__ import annotations

import time
from typing import Any

import pytest
from vllm_load import Load
from vllm_support import SEQ_CAP, snapshot

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(900)]


def test_idle_server_reads_zero_work_and_no_gpu(seq_cap_server: Any) -> None:
    report = snapshot(seq_cap_server.url, 4)

    assert len(report["engines"]) == 1
    e = report["engines"][0]
    assert e["model_name"] == "tiny-llama"
    assert e["running"] == 0 and e["waiting"] == 0
    assert e["kv_cache_usage"] == 0
    assert e["samples"] >= 2
    # A CPU-only box: no GPU was read, and the report says so instead of inventing zeros.
    assert report["gpus"] == []
    assert report["verdicts"][0]["cause"] == "idle"


def test_loaded_server_reads_the_cap_the_queue_and_the_token_rate(seq_cap_server: Any) -> None:
    with Load(seq_cap_server.url, concurrency=3 * SEQ_CAP, max_tokens=200) as load:
        time.sleep(3)  # let the queue form before the window opens
        t0, tokens0 = time.monotonic(), load.stats.tokens
        report = snapshot(seq_cap_server.url, 6)
        client_tok_s = (load.stats.tokens - tokens0) / (time.monotonic() - t0)
    assert load.stats.errors == []

    e = report["engines"][0]
    # 12 streams against 4 slots: the engine runs 4 and queues the rest for capacity.
    # (A scrape between one request finishing and the next being admitted reads one fewer.)
    assert e["running_max"] == SEQ_CAP, e
    assert 0.75 * SEQ_CAP <= e["running"] <= SEQ_CAP, e
    assert e["waiting"] >= SEQ_CAP, e
    assert e["waiting_capacity"] >= SEQ_CAP, e
    # The engine's own token rate agrees with what the client received.
    assert e["generation_tokens_per_s"] > 0
    assert 0.6 < e["generation_tokens_per_s"] / client_tok_s < 1.6, (e, client_tok_s)
    assert e["ttft_p50_s"] is not None and e["ttft_p50_s"] > 0
    assert e["kv_cache_usage"] is not None and 0 < e["kv_cache_usage"] < 0.5
