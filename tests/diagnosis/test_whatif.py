"""The what-if from one window, against what the simulated box does once relaunched with the
proposed value (on its virtual clock, read through headroom's own parsers:
virtual_box.py), and on a replayed recording of the real-time simulator.

Each case: the value a user is told to try, the limit named behind it, and the throughput
predicted at the new limit against what a sweep of the relaunched box measures at its knee
(within 0.8-1.25), with the limit that then held requests back read from the simulated
engine's own state.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

from virtual_box import blocking, closed_loop, sweep_knee

from monitor.diagnosis import Caps, diagnose
from monitor.diagnosis.verdict import Verdict
from monitor.diagnosis.whatif import Knobs, Load, StepModel, predict
from monitor.read.recording import read_recording
from monitor.tui.feeds import default_replay_monitor
from monitor.watch.report import build_report, render_text
from monitor.window.scopes import engine_scope
from simulator.config import SimConfig
from simulator.scenarios import build

RECORDINGS = Path(__file__).resolve().parent.parent / "fixtures" / "recordings"
FIELD = {
    "max_num_seqs": "max_num_seqs",
    "num_gpu_blocks": "num_blocks",
    "max_num_batched_tokens": "max_num_batched_tokens",
}
# Shorter than the bench's (60 s warm-up, 40 s windows): enough for these requests' few seconds.
KW = {"warmup_s": 40.0, "window_s": 20.0}


def caps_of(cfg: SimConfig) -> Caps:
    return Caps(cfg.engine.max_num_seqs, cfg.engine.max_num_batched_tokens)


def whatif_at(cfg: SimConfig, load: int) -> tuple[list[dict[str, Any]], list[Verdict], dict]:
    w = closed_loop(cfg, load, **KW)
    d = diagnose(w, caps=caps_of(cfg))
    report = build_report(w, d.verdicts, d.analyses)
    assert d.analyses[engine_scope(w.engines[0])]["whatif"] == report["engines"][0]["whatif"]
    return report["engines"][0]["whatif"], list(d.verdicts), report


def relaunched(cfg: SimConfig, *moves: dict[str, Any]) -> SimConfig:
    changes = {FIELD[m["knob"]]: m["proposed"] for m in moves}
    return dataclasses.replace(cfg, engine=dataclasses.replace(cfg.engine, **changes))


def measured(cfg: SimConfig, concurrency: float) -> tuple[float, str]:
    """Tokens/s at the relaunched box's knee, and what held requests back past it."""
    knee, _ = sweep_knee(cfg, most=max(64, int(4 * concurrency)), **KW)
    held = blocking(cfg, max(2 * knee[0], knee[0] + 2), **KW)
    return knee[1], next(iter(held))


def test_a_sequence_cap_with_the_kv_cache_behind_it() -> None:
    box = build("seq-cap", engine={"num_blocks": 480, "max_model_len": 1024})
    whatif, verdicts, report = whatif_at(box, 32)
    first = whatif[0]
    assert (first["flag"], first["current"], first["proposed"]) == ("--max-num-seqs", 8, 16)
    p = first["predicted"]
    # 480 blocks hold ~13 of these requests at 90% full: the KV cache binds before 16.
    assert p["limit"] == "kv-cap" and 11 <= p["concurrency"] <= 15
    assert first["next_limit"]["limit"] == "seq-cap"
    tok, held = measured(relaunched(box, first), p["concurrency"])
    assert 0.8 <= p["throughput_tok_s"] / tok <= 1.25, (p, tok)
    assert held == "kv-cap"
    # The cap verdict's fix and the snapshot's text quote it.
    assert verdicts[0].cause == "seq-cap"
    quoted = r"raise --max-num-seqs 8 -> 16: ~1\.[4-7]x tokens/s, then kv-cap at ~1[23] sequences"
    assert re.search(quoted, verdicts[0].fix), verdicts[0].fix
    assert "  what-if: raise --max-num-seqs 8 -> 16" in render_text(report)
    # The change after it, on top of the first: room for the 16 sequences.
    second = whatif[1]
    assert second["flag"] == "--num-gpu-blocks-override" and second["current"] == 480
    assert isinstance(second["proposed"], int) and second["proposed"] > 480
    assert second["predicted"]["limit"] == "seq-cap"
    tok, held = measured(relaunched(box, first, second), 16)
    assert 0.8 <= second["predicted"]["throughput_tok_s"] / tok <= 1.25
    assert held == "seq-cap"


def test_a_full_kv_cache_more_blocks() -> None:
    box = build("kv-cap")
    whatif, verdicts, _ = whatif_at(box, 24)
    w = whatif[0]
    assert (w["flag"], w["current"], w["proposed"]) == ("--num-gpu-blocks-override", 320, 640)
    assert w["predicted"]["limit"] == "kv-cap"
    tok, held = measured(relaunched(box, w), w["predicted"]["concurrency"])
    assert 0.8 <= w["predicted"]["throughput_tok_s"] / tok <= 1.25, (w, tok)
    assert held == "kv-cap"
    assert "raise --num-gpu-blocks-override 320 -> 640" in verdicts[0].fix


def test_a_token_budget_pinned_by_long_prompts() -> None:
    box = build("token-cap")
    whatif, verdicts, _ = whatif_at(box, 8)
    w = whatif[0]
    assert (w["flag"], w["current"], w["proposed"]) == ("--max-num-batched-tokens", 128, 256)
    p = w["predicted"]
    # Prompts take half as many steps; each step is longer by the tensor work it adds.
    assert p["ttft_growth"] < 1.0 < p["itl_growth"]
    tok, held = measured(relaunched(box, w), p["concurrency"])
    assert 0.8 <= p["throughput_tok_s"] / tok <= 1.25, (p, tok)
    assert held == p["limit"] == "token-cap"


def test_a_replayed_recording_of_the_sequence_cap_story() -> None:
    """The real-time simulator's seq-cap story as recorded (its steps slower than the virtual
    box's on a busy host): the gain it predicts, against the virtual box's gain from 8 to 16."""
    recording = read_recording(RECORDINGS / "seq-cap.jsonl")
    monitor = default_replay_monitor(recording)
    for tick in recording.ticks:
        assert tick.snapshot is not None
        monitor.sampler.push(tick.snapshot)
    report = monitor.report()
    monitor.sampler.close()
    assert report is not None
    w = report["engines"][0]["whatif"][0]
    assert (w["flag"], w["current"], w["proposed"]) == ("--max-num-seqs", 8, 16)
    assert w["predicted"]["limit"] == "seq-cap"
    box = build("seq-cap")
    before, _ = measured(box, 8)
    after, _ = measured(relaunched(box, w), 16)
    assert 0.8 <= w["predicted"]["gain"] / (after / before) <= 1.25


def test_llama_cpp_slots_are_raised_with_parallel() -> None:
    load = Load(running=3.9, tokens_per_s=120.0, rate_rps=0.5,
                limits={"seq-cap": 4 / 3.9, "kv-cap": 0.9 / 0.3}, step=StepModel())  # fmt: skip
    knobs = Knobs(flavour="llamacpp", seq_cap=4, seq_flag="--parallel", token_flag=None)
    (w,) = [x for x in predict(load, knobs) if x["flag"] == "--parallel"]
    assert (w["current"], w["proposed"]) == (4, 8)
    # The slots share one context: it fills at ~11.7 sequences, past the 8 slots.
    assert w["predicted"]["limit"] == "seq-cap" and w["next_limit"]["limit"] == "kv-cap"
    assert "steps do not lengthen with the batch (no GPU activity read)" in w["basis"]["assumed"]


def test_a_token_budget_without_gpu_readings_says_its_prompt_tokens_may_cost() -> None:
    # vLLM-CPU, --max-num-batched-tokens 128 with 480-token prompts: no GPU to read, so the
    # flat-step model promises the doubling; the basis says where that fails (its own cores
    # at their limit: 1.26x measured against 1.78x promised, bench/results/whatif_vllm_*).
    load = Load(running=9.0, tokens_per_s=1056.0, rate_rps=2.0,
                limits={"token-cap": 8.98 / 9.0, "seq-cap": 16 / 9.0}, step=StepModel(),
                tokens_per_step=128.0, prompt_tokens_mean=480.0)  # fmt: skip
    (w, *_) = predict(load, Knobs(seq_cap=16, token_budget=128))
    assert (w["flag"], w["current"], w["proposed"]) == ("--max-num-batched-tokens", 128, 256)
    assert any("prompt tokens" in a and "CPU build" in a for a in w["basis"]["assumed"]), w
    # With the GPU's activity read the step model prices them: no such caveat.
    box = build("token-cap")
    (read, *_), _, _ = whatif_at(box, 8)
    assert not any("prompt tokens" in a for a in read["basis"]["assumed"]), read


def test_no_what_if_where_the_gpu_itself_is_the_limit() -> None:
    load = Load(running=40.0, tokens_per_s=900.0, rate_rps=2.0,
                limits={"compute": 0.9, "seq-cap": 6.4}, step=StepModel(compute=0.8))  # fmt: skip
    assert predict(load, Knobs(seq_cap=256)) == []


def test_the_json_carries_the_fields_scripts_read() -> None:
    load = Load(running=8.0, tokens_per_s=1000.0, rate_rps=2.0,
                limits={"seq-cap": 1.0, "kv-cap": 3.0}, step=StepModel(compute=0.1))  # fmt: skip
    w = predict(load, Knobs(seq_cap=8))[0]
    assert set(w) >= {"knob", "flag", "current", "proposed", "predicted", "next_limit", "basis"}
    assert set(w["predicted"]) >= {"limit", "concurrency", "throughput_tok_s", "rate_rps",
                                   "ttft_growth", "itl_growth"}  # fmt: skip
    assert set(w["basis"]) == {"measured", "assumed"}


def test_a_change_that_gains_nothing_alone_is_proposed_only_with_the_one_on_top() -> None:
    # The KV cache fills 2% past the cap: raising the cap alone would buy nothing worth a
    # restart, raising both buys more (the simulator's kv-cap box at 640 blocks and 64
    # sequences, where the tune stopped for want of a change).
    load = Load(running=64.0, tokens_per_s=5000.0, rate_rps=5.0,
                limits={"seq-cap": 1.0, "kv-cap": 1.02}, step=StepModel(compute=0.1))  # fmt: skip
    first, second = predict(load, Knobs(seq_cap=64, num_gpu_blocks=4000))
    assert first["knob"] == "max_num_seqs" and first["predicted"]["gain"] < 1.05
    assert "buys nothing alone" in first["basis"]["assumed"][-1]
    assert second["knob"] == "num_gpu_blocks" and second["predicted"]["gain"] >= 1.05
    # Without a knob for the KV cache, nothing is proposed.
    assert predict(load, Knobs(seq_cap=64)) == []
