"""The headroom figure on a simulated memory-bound box, read through headroom's own parsers
on the box's virtual clock (tests/diagnosis/virtual_box.py): estimates from windows at
different loads against what the same box then does at higher loads.

The box: an 8B model on an H200 serving 2,000-token prompts and ~2,000-token answers, so
each decode step streams the weights and a KV cache that grows with the batch. Its KV cache
fills near 285 running sequences, before its bandwidth knee: `kv-cap` comes first, and the
bandwidth limit, which `limits` still reports, lies past every load where a doubling still
gained a fifth or more.
"""

from __future__ import annotations

import pytest
from virtual_box import closed_loop

from monitor.diagnosis import Caps, diagnose
from monitor.window.scopes import engine_scope
from simulator.scenarios import build

BOX = build(
    "memory-bound",
    engine={"gpu": "h200", "max_num_seqs": 1024, "max_model_len": 16384},
    load={"prompt_tokens": 2000, "output_tokens": 2000, "output_jitter": 0.5,
          "prompt_jitter": 0.5},
)  # fmt: skip


def _run(n: int) -> tuple[float, dict]:
    w = closed_loop(BOX, n, warmup_s=120, window_s=30)
    e = w.engines[0]
    room = diagnose(w, caps=Caps()).analyses[engine_scope(e)]["headroom"]
    return e.generation_tokens_per_s or 0.0, room


@pytest.fixture(scope="module")
def runs() -> dict[int, tuple[float, dict]]:
    return {n: _run(n) for n in (16, 32, 64, 128, 512)}


def test_the_kv_cache_is_named_first_where_it_fills(runs: dict[int, tuple[float, dict]]) -> None:
    full = runs[512][1]["concurrency_at_limit"]  # what the box holds once its KV is full
    for n in (16, 64, 128):
        room = runs[n][1]
        assert room["limit"] == "kv-cap", room
        # 90% of the cache (kv_full): 0.9 of what fits.
        assert room["concurrency_at_limit"] == pytest.approx(0.9 * full, rel=0.1), (n, room)


def test_the_bandwidth_limit_agrees_across_loads_and_lies_past_the_strong_gains(
    runs: dict[int, tuple[float, dict]],
) -> None:
    at = {n: runs[n][1]["limits"]["bandwidth"] * n for n in (16, 64, 128)}
    assert max(at.values()) < 1.5 * min(at.values()), at
    # Throughput still gained a fifth or more per doubling up to 128 streams: no limit there.
    tps = {n: runs[n][0] for n in (32, 64, 128)}
    assert tps[64] > 1.2 * tps[32] and tps[128] > 1.2 * tps[64], tps
    assert min(at.values()) > 128, at
