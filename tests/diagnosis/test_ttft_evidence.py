"""Where the time to first token goes, as evidence for the cap that makes it."""

from __future__ import annotations

import pytest
from diag_windows import gpu, make_window

from monitor.diagnosis import Caps, diagnose
from monitor.diagnosis.verdict import Verdict

MID_GPU = gpu(0.6, 0.5, 0.3, 0.3)
# Four slots full, eight waiting: 0.5 req/s of 8 s service, 16 s in the queue.
CAPPED = dict(running=4, waiting=8, waiting_capacity=8, rps=0.5, e2e_s=24.0, queue_s=16.0)
# Six running, four waiting, every engine step at 2,048 tokens, nine in ten of them prompt.
TOKEN_PINNED = dict(running=6, waiting=4, rps=1.0, steps_per_s=10, tokens_per_step=2048,
                    prompt_tps=18000, gen_tps=2000)  # fmt: skip


def top(engine: dict, caps: Caps | None = None) -> Verdict:
    return diagnose(make_window(gpus=[MID_GPU], engine=engine), caps=caps or Caps()).verdicts[0]


def evidence(v: Verdict) -> dict[str, float | None]:
    return {e.name: e.value for e in v.evidence}


def test_a_first_token_spent_waiting_for_a_slot_supports_the_sequence_cap() -> None:
    plain = top(CAPPED)
    timed = top({**CAPPED, "ttft_s": 16.4, "prefill_s": 0.3})
    assert plain.cause == timed.cause == "seq-cap"
    assert "ttft_queue_share" not in evidence(plain)
    assert evidence(timed)["ttft_queue_share"] > 0.9
    assert "98% of the time to first token is the wait for a slot" in timed.summary
    assert timed.confidence > plain.confidence


def test_a_first_token_spent_in_prefill_supports_the_token_budget() -> None:
    plain = top(TOKEN_PINNED)
    timed = top({**TOKEN_PINNED, "ttft_s": 0.8, "queue_s": 0.1, "prefill_s": 0.6})
    assert plain.cause == timed.cause == "token-cap"
    assert evidence(timed)["ttft_prefill_share"] == pytest.approx(0.75)
    assert "prefill is 75% of the time to first token" in timed.summary
    assert timed.confidence > plain.confidence


def test_parts_that_outgrow_the_whole_are_not_evidence() -> None:
    # Queue and prefill times come from requests that finished, TTFTs from requests that
    # started: over a window shorter than a request they need not fit. Then they say nothing.
    v = top({**CAPPED, "ttft_s": 2.0, "prefill_s": 0.3})
    assert v.cause == "seq-cap"
    assert "ttft_queue_share" not in evidence(v)
    assert "first token" not in v.summary
