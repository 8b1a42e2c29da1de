"""What a step costs, learned from earlier windows where no GPU activity says it: the line
T(n) = a + b n through real vLLM-CPU's readings, and the what-if that prices a bigger token
budget with it once the Diagnoser has watched the engine at other loads."""

from __future__ import annotations

from typing import Any

import pytest
from diag_windows import make_window

from monitor.diagnosis import Caps, diagnose
from monitor.diagnosis.hysteresis import Diagnoser
from monitor.diagnosis.step_cost import MAX_AGE_S, StepMemory, StepPoint, fit
from monitor.window.scopes import engine_scope

# Real vLLM-CPU pinned to one core, 480-token prompts and 32-token answers (mean tokens a step,
# ms a step: 1 / steps a second), --max-num-batched-tokens 128 at 1, 4 and 16 streams, and
# 256 at 16 streams (bench/results/step_cost_vllm_cpu.txt).
BUDGET_128 = [(16.04, 2.908), (55.36, 5.555), (128.15, 9.238)]
BUDGET_256_AT_16 = (236.04, 14.828)


def test_a_line_through_three_loads_prices_a_step_of_twice_the_budget() -> None:
    cost = fit(StepPoint(n, ms / 1e3, 0.0) for n, ms in BUDGET_128)
    assert cost is not None
    n, measured = BUDGET_256_AT_16
    assert cost.seconds(n) * 1e3 == pytest.approx(measured, rel=0.06)
    # The per-step part (the scheduler and the host's work) is most of a small step, the
    # tokens most of a full one.
    assert cost.token_share(16) < 0.4 < 0.6 < cost.token_share(128)


@pytest.mark.parametrize(
    ("points", "why"),
    [
        ([(100, 9.0), (140, 11.0)], "too close together for a line"),
        ([(16, 5.0), (128, 4.0)], "a step shorter with more tokens"),
        ([(16, 0.5), (128, 9.0)], "a step's fixed part below zero"),
        ([(128, 9.0)], "one point"),
    ],
)
def test_no_line_where_the_points_cannot_carry_one(
    points: list[tuple[float, float]], why: str
) -> None:
    assert fit(StepPoint(n, ms / 1e3, 0.0) for n, ms in points) is None, why


def test_memory_keeps_one_point_a_load_and_forgets_old_ones() -> None:
    mem = StepMemory()
    for i in range(100):  # hours at one load, one window at another
        mem.add("e", StepPoint(128.0 + (i % 3), 0.0092, float(i)))
    mem.add("e", StepPoint(16.0, 0.0029, 100.0))
    cost = mem.costs(now=100.0)["e"]
    assert cost.points == 2  # 128-130 tokens fall in one bin: the newest stands for it
    assert mem.costs(now=100.0 + MAX_AGE_S + 1.0) == {}


def _window(
    running: float, waiting: float, ms: float, tokens: float, wall0: float, **more: Any
) -> Any:
    gen = 0.9 * running * 1e3 / ms  # most running sequences decode a token a step
    rps = gen / 32.0  # 32-token answers to 480-token prompts
    engine = dict(
        running=running, waiting=waiting, steps_per_s=1e3 / ms, tokens_per_step=tokens,
        prompt_tps=gen * 15.0, gen_tps=gen, rps=rps, e2e_s=(running + waiting) / rps, **more,
    )  # fmt: skip
    return make_window(n=11, engine=engine, wall0=wall0)


def _token_whatif(d: Any, w: Any) -> dict[str, Any]:
    scope = engine_scope(w.engines[0])
    return next(x for x in d.analyses[scope]["whatif"] if x["knob"] == "max_num_batched_tokens")


def test_the_diagnoser_prices_a_bigger_budget_with_the_steps_it_has_watched() -> None:
    caps = Caps(max_num_seqs=16, max_num_batched_tokens=128)
    capped = _window(9, 6, 9.238, 128.15, 2_000_000_000.0)
    # One window alone: every step alike, so steps are assumed flat and the doubled budget
    # promises the sequences' own gain.
    alone = _token_whatif(diagnose(capped, caps=caps), capped)
    assert alone["predicted"]["gain"] > 1.6
    assert any("do not lengthen" in a for a in alone["basis"]["assumed"])
    # The Diagnoser that watched the engine at 1 and 4 streams first knows a step's tokens
    # cost time: the same change buys about what the relaunched engine measured (1.15x).
    judge = Diagnoser(caps=caps)
    for i, (running, (n, ms)) in enumerate(zip((1, 4), BUDGET_128[:2], strict=True)):
        judge.update(_window(running, 0, ms, n, 1_999_999_000.0 + 100 * i))
    learned = _token_whatif(judge.update(capped), capped)
    assert 1.05 <= learned["predicted"]["gain"] <= 1.25
    assert any("ms a token" in m for m in learned["basis"]["measured"])
    assert not any("do not lengthen" in a for a in learned["basis"]["assumed"])


def _kv_whatif(d: Any, w: Any) -> dict[str, Any]:
    scope = engine_scope(w.engines[0])
    return next(x for x in d.analyses[scope]["whatif"] if x["knob"] == "num_gpu_blocks")


def test_a_thrashing_window_is_no_point_and_a_bigger_cache_gives_its_recompute_back() -> None:
    # vLLM-CPU, 32+200-token requests (bench/results/whatif_vllm_session23.txt): the ramp's
    # clean windows at 2 and 4 running, then a KV cache of 16 blocks thrashing at 10 running,
    # 8 preemptions a second, its steps 5.6 ms for 11.4 tokens where the line says ~4.6.
    caps = Caps(max_num_seqs=16)
    judge = Diagnoser(caps=caps)
    for i, (running, n, ms) in enumerate(((2, 2.3, 2.3), (4, 4.6, 2.9))):
        judge.update(_window(running, 0, ms, n, 1_999_999_000.0 + 100 * i, kv=0.3))
    blocks = (("num_gpu_blocks", "16"), ("num_gpu_blocks_override", "16"))
    thrash = dict(kv=1.0, preempt_per_s=8.2, cache_config=blocks)
    judge.update(_window(10, 6, 7.5, 11.4, 1_999_999_500.0, **thrash))  # no point of its own
    window = _window(10, 6, 5.6, 11.4, 2_000_000_000.0, **thrash)
    w = _kv_whatif(judge.update(window), window)
    line = [m for m in w["basis"]["measured"] if "ms a token" in m]
    assert line and "fitted to 2 windows" in line[0]  # the thrashing windows left out
    back = [m for m in w["basis"]["measured"] if "preempted" in m]
    assert back and back[0].startswith("steps ran 1.2")
    # The same window read alone (no line): no recompute to give back is claimed.
    alone = _kv_whatif(diagnose(window, caps=caps), window)
    assert not any("preempted" in m for m in alone["basis"]["measured"])
