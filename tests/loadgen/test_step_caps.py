"""A sweep's steps are diagnosed with the caps the user gave (`--max-num-seqs`; a tune's run:
the value it launched with): the step's verdict, headroom figure and what-if come from one
diagnosis that knows the cap, rather than one that must infer it from a plateau."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "diagnosis"))

from virtual_box import closed_loop  # noqa: E402

from loadgen.engine_view import engine_view  # noqa: E402
from monitor.diagnosis import Caps  # noqa: E402
from simulator.scenarios import build  # noqa: E402

BOX = build("seq-cap", engine={"num_blocks": 480, "max_model_len": 1024})  # max_num_seqs 8


def test_a_light_step_given_the_cap_has_its_what_if() -> None:
    # 3 streams of 8 slots: no plateau to infer the cap from, and this engine's page does
    # not report it.
    w = closed_loop(BOX, 3, warmup_s=60, window_s=30)
    bare = engine_view(w)
    assert not any(x["knob"] == "max_num_seqs" for x in bare.whatif or [])
    given = engine_view(w, Caps(max_num_seqs=8))
    (first, *_) = given.whatif or [{}]
    assert (first.get("knob"), first.get("current")) == ("max_num_seqs", 8)
    assert "--max-num-seqs 8: as given to headroom" in first["basis"]["measured"]
    # The step's headroom figure is of the same diagnosis: the cap it knows binds first.
    assert given.headroom["limit"] in ("seq-cap", "kv-cap")
    assert given.headroom["limits"]["seq-cap"] == round(8 / w.engines[0].running_mean, 3)
