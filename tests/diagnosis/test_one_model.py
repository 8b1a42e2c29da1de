"""The headroom line and the what-if read one model of the box: at today's limit they say the
same rate and throughput (issue 29: the headroom figure added the tensor work to the step
while the what-if overlapped it with the weights' stream, so the two disagreed on one window).

Each what-if's gain is against the box at today's limit, so its predicted rate over its gain
is the rate it takes for today's limit: the headroom figure's rate_at_limit_rps. Windows from
the simulated box on its virtual clock (tests/diagnosis/virtual_box.py) under light loads,
where the steps still have room to lengthen, and from recorded sessions replayed.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from virtual_box import closed_loop

from monitor.diagnosis import Caps, diagnose
from monitor.read.recording import read_recording
from monitor.window.full import compute_window
from monitor.window.scopes import engine_scope
from simulator.scenarios import build

RECORDINGS = Path(__file__).resolve().parents[1] / "fixtures" / "recordings"

# scenario, engine overrides, streams: each well below the limit that binds.
BOXES = {
    "seq-cap": ("seq-cap", {}, 2),
    "seq-cap, KV behind": ("seq-cap", {"num_blocks": 480, "max_model_len": 1024}, 3),
    "kv-cap": ("kv-cap", {}, 2),
    "token-cap": ("token-cap", {}, 2),
    "kv-cap, from --gpu-memory-utilization": (
        "kv-cap",
        {"num_blocks": 0, "gpu_memory_utilization": 0.23},
        8,
    ),
}


def _check(a: dict) -> int:
    """Set each what-if's today beside the headroom figure; how many were checked."""
    room, whatif = a["headroom"], a["whatif"]
    if room is None or not whatif:
        return 0
    w = whatif[0]
    p = w["predicted"]
    # The first change's gain is against the limit the headroom line names.
    if room["rate_at_limit_rps"] is not None and p["rate_rps"] is not None:
        assert p["rate_rps"] / p["gain"] == pytest.approx(room["rate_at_limit_rps"], rel=0.01), (
            room,
            w,
        )
    at_limit = p["throughput_tok_s"] / p["gain"]
    # Tokens at today's limit: today's tokens/s times the factor, over the steps' growth there.
    assert at_limit == pytest.approx(
        a["_tokens_per_s"] * room["factor"] / room["latency_growth"], rel=0.01
    ), (room, w)
    return 1


@pytest.mark.parametrize("name", list(BOXES))
def test_the_headroom_line_and_the_what_if_say_one_rate_at_today_s_limit(name: str) -> None:
    scenario, engine, streams = BOXES[name]
    cfg = build(scenario, engine=engine)
    w = closed_loop(cfg, streams, warmup_s=60, window_s=30)
    e = w.engines[0]
    caps = Caps(
        max_num_seqs=cfg.engine.max_num_seqs,
        max_num_batched_tokens=cfg.engine.max_num_batched_tokens,
    )
    a = dict(diagnose(w, caps=caps).analyses[engine_scope(e)])
    a["_tokens_per_s"] = e.generation_tokens_per_s
    assert a["headroom"]["factor"] > 1.5, a["headroom"]  # room to grow: the steps lengthen
    assert a["whatif"], a["headroom"]
    assert _check(a) == 1


@pytest.mark.parametrize("name", ["seq-cap", "starved"])
def test_replayed_sessions_say_one_rate_at_today_s_limit(name: str) -> None:
    ticks = read_recording(RECORDINGS / f"{name}.jsonl").ticks
    snaps = [t.snapshot for t in ticks if t.snapshot is not None]
    checked = 0
    for i in range(3, len(snaps)):
        w = compute_window(snaps[: i + 1], snaps[max(0, i - 10)].t, snaps[i].t)
        if w is None or not w.engines:
            continue
        e = w.engines[0]
        a = dict(diagnose(w).analyses[engine_scope(e)])
        a["_tokens_per_s"] = e.generation_tokens_per_s
        if a["_tokens_per_s"]:
            checked += _check(a)
    assert checked, "no window with both a headroom figure and a what-if"
