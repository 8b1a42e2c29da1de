"""Where the sequence cap comes from: given, reported by the engine, inferred, remembered, or unknown.

The cap decides the fill rate a starved box is told to reach; an assumed
default (vLLM's 256 was once assumed) told a box of 64 slots to send 27 req/s.
"""

from __future__ import annotations

import pytest
from diag_windows import gpu, make_window

from monitor.diagnosis import Caps, Diagnoser, diagnose
from monitor.window.scopes import engine_scope

ROOMY_GPU = gpu(1.0, 0.89, 0.05, 0.82)  # memory-bound decode: tensor cores idle, room for more
QUEUED = dict(running=8, waiting=24, rps=2.0, e2e_s=4.0, queue_s=1.0)
# vLLM's estimated FLOPs and bytes at 30 steps a second of an 8B model: the KV cache of the
# 4 sequences is 12% of the bytes a step reads, so the steps lengthen as sequences are added.
LIGHT = dict(running=4, waiting=0, rps=1.0, e2e_s=4.0, queue_s=0.0, steps_per_s=30,
             tokens_per_step=4, gen_tps=120.0, flops_per_s=2 * 8e9 * 120,
             bytes_per_s=16e9 * 30 / 0.88)  # fmt: skip


def _analysis(d, w):  # type: ignore[no-untyped-def]
    return d.analyses[engine_scope(w.engines[0])]


def test_the_engines_own_cap_beats_inference_and_the_users_flag_beats_both() -> None:
    w = make_window(10, gpus=[ROOMY_GPU], engine=dict(**LIGHT, reported_seqs=64))
    a = _analysis(diagnose(w), w)
    assert (a["seq_cap"], a["seq_cap_origin"], a["seq_cap_reported_by"]) == (
        64,
        "reported",
        "server_info",
    )
    top = diagnose(w).verdicts[0]
    assert top.cause == "starved"
    # 4 running of 64, each request holding a slot 4 s: 16 req/s fills them at today's
    # request time, now 1 req/s (the fix leads with the rate that allows for longer steps).
    assert top.fix.startswith("send about ") and " to fill 64 slots" in top.fix
    assert "(16 req/s at today's request time; now 1 req/s" in top.fix
    given = _analysis(diagnose(w, caps=Caps(max_num_seqs=32)), w)
    assert (given["seq_cap"], given["seq_cap_origin"]) == (32, "given")


def test_without_any_source_the_cap_is_unknown_not_assumed() -> None:
    w = make_window(10, gpus=[ROOMY_GPU], engine=LIGHT)
    d = diagnose(w)
    a = _analysis(d, w)
    assert a["seq_cap"] is None and a["seq_cap_origin"] is None and a["fill_rate_rps"] is None
    top = d.verdicts[0]
    assert top.cause == "starved" and "cap unknown: pass --max-num-seqs" in top.fix
    assert "256" not in top.fix + top.summary


def test_a_cap_inferred_under_load_is_kept_when_the_load_stops_and_says_when() -> None:
    dg = Diagnoser()
    loaded = make_window(10, gpus=[ROOMY_GPU], engine=QUEUED, wall0=1_800_000_000.0)
    first = dg.update(loaded)
    assert _analysis(first, loaded)["seq_cap_origin"] == "inferred"
    light = make_window(10, gpus=[ROOMY_GPU], engine=LIGHT, wall0=1_800_000_100.0)
    later = dg.update(light)
    a = _analysis(later, light)
    assert (a["seq_cap"], a["seq_cap_origin"]) == (8, "remembered")
    assert a["seq_cap_seen_at"] == pytest.approx(loaded.wall_end)
    starved = next(v for v in later.verdicts if v.cause == "starved")
    assert "to fill 8 slots" in starved.fix
    # A fresh Diagnoser (a restart) has nothing to remember.
    assert _analysis(Diagnoser().update(light), light)["seq_cap_origin"] is None


def test_a_queue_that_comes_and_goes_is_not_called_nothing_waits() -> None:
    # Waiting averages 0.9 (above the 0.5 line) but only in a third of the readings: not a
    # sustained queue, so starved may hold, but its words must not contradict its evidence.
    w = make_window(
        9,
        gpus=[ROOMY_GPU],
        engine=dict(LIGHT, waiting=[0, 0, 3, 0, 0, 3, 0, 0, 2.1]),
    )
    top = diagnose(w, caps=Caps(max_num_seqs=64)).verdicts[0]
    assert top.cause == "starved"
    assert "nothing waits" not in top.summary and "now and then" in top.summary
    decisive = [e for e in top.evidence if e.name.startswith("waiting")]
    assert decisive and all(e.relation() == e.op for e in decisive if e.op)


def test_fixes_shown_together_do_not_pull_one_flag_two_ways() -> None:
    # KV full and preempting, 18.7 waiting, on a memory-bound GPU: kv-cap leads and says to
    # lower --max-num-seqs (to a whole number); memory-bound must not say to raise it.
    w = make_window(
        10,
        gpus=[gpu(0.98, 0.9, 0.1, 0.85)],
        engine=dict(running=5.27, waiting=18.7, kv=0.97, rps=1.0, e2e_s=5.0, preempt_per_s=0.5),
    )
    for d in (diagnose(w), Diagnoser().update(w)):
        causes = [v.cause for v in d.verdicts]
        assert causes[0] == "kv-cap" and "memory-bound" in causes
        assert "lower --max-num-seqs to 5 " in d.verdicts[0].fix
        mem = next(v for v in d.verdicts if v.cause == "memory-bound")
        assert "raise --max-num-seqs" not in mem.fix
        assert "follow the kv-cap fix first" in mem.fix and "quantise" in mem.fix
