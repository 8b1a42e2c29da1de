"""A weak hint that held a window longer never leads a strong cause that missed one window."""

from __future__ import annotations

import pytest

import monitor.diagnosis.hysteresis as hysteresis
from monitor.diagnosis import Diagnoser, Diagnosis
from monitor.diagnosis.verdict import Verdict
from monitor.window.full import compute_window

SEQ = Verdict("seq-cap", 0.75, "engine:m/0@u", (), "raise --max-num-seqs above 4", "cap")
HINT = Verdict("cpu-bound", 0.3, "engine:m/0@u", (), "more CPU", "possibly CPU")


def run(monkeypatch: pytest.MonkeyPatch, frames: list[tuple[Verdict, ...]]) -> Diagnosis:
    it = iter(frames)
    monkeypatch.setattr(
        hysteresis,
        "diagnose",
        lambda w, th, caps, seen=None, reconcile=True, **_: Diagnosis(next(it), {}),
    )
    d = Diagnoser()
    out = None
    for _ in frames:
        out = d.update(compute_window([]))
    assert out is not None
    return out


def test_pending_strong_cause_leads_a_stable_weak_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    # seq-cap and the hint both hold, then seq-cap misses one window (a stall), then returns:
    # the hint is stable, seq-cap pending again -- seq-cap must still come first.
    out = run(monkeypatch, [(SEQ, HINT), (HINT,), (SEQ, HINT)])
    assert [v.cause for v in out.verdicts][:2] == ["seq-cap", "cpu-bound"]


def test_stable_strong_cause_leads(monkeypatch: pytest.MonkeyPatch) -> None:
    out = run(monkeypatch, [(SEQ, HINT), (SEQ, HINT), (SEQ, HINT)])
    assert [v.cause for v in out.verdicts] == ["seq-cap", "cpu-bound"]
    assert out.verdicts[0].confidence == 0.75  # stable: not scaled
