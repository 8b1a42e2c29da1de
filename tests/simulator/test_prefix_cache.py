"""The simulator's prefix cache: a prompt whose leading blocks were computed before skips them."""

from __future__ import annotations

import pytest

from simulator import Simulator
from simulator.engine import Request
from simulator.server import block_hashes


def _run_one(sim: Simulator, words: list[str], max_tokens: int = 4) -> Request:
    req = Request(len(words), max_tokens, arrival=sim.now)
    req.block_hashes = block_hashes(words, sim.cfg.engine.block_size)
    sim.core.add(req)
    while req.finished_at is None:
        assert sim.step() is not None
    return req


@pytest.mark.parametrize("caching", [True, False])
def test_a_repeated_prefix_skips_its_prefill_and_is_counted(caching: bool) -> None:
    # A 1B model on an H100 with 4096 prompt tokens: prefill is compute, long enough to see.
    sim = Simulator("idle", load=False, engine={"model": "llama-1b", "prefix_caching": caching})
    shared = [f"s{i}" for i in range(4000)]
    first = _run_one(sim, shared + [f"a{i}" for i in range(96)])
    second = _run_one(sim, shared + [f"b{i}" for i in range(96)])
    ttft = [r.first_token - r.first_scheduled for r in (first, second)]
    st = sim.stats
    if caching:
        # 4000 // 16 = 250 shared blocks: the second prompt prefills only its own 96 tokens.
        assert st.prefix_cache_hits == 4000
        assert st.prefix_cache_queries == 2 * 4096
        assert ttft[1] < 0.3 * ttft[0]
    else:
        assert st.prefix_cache_hits == st.prefix_cache_queries == 0
        assert ttft[1] == pytest.approx(ttft[0], rel=0.05)


def test_a_different_first_block_misses_everything_after_it() -> None:
    sim = Simulator("idle", load=False, engine={"model": "llama-1b"})
    body = [f"s{i}" for i in range(512)]
    _run_one(sim, ["x"] + body)
    _run_one(sim, ["y"] + body)  # same words after the first, but a block hash is chained
    assert sim.stats.prefix_cache_hits == 0
