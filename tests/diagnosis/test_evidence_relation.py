"""Evidence never states a false comparison: the shown relation is the one that holds."""

from __future__ import annotations

import pytest

from monitor.diagnosis.verdict import Evidence, Verdict


@pytest.mark.parametrize(
    ("value", "op", "threshold", "shown"),
    [
        (0.0389, ">=", 0.5, "<"),
        (0.6, ">=", 0.5, ">="),
        (0.5, ">", 0.5, "<="),
        (0.2, "<", 0.3, "<"),
        (0.3, "<", 0.3, ">="),
        (0.4, "<=", 0.3, ">"),
    ],
)
def test_shown_relation_is_true(value: float, op: str, threshold: float, shown: str) -> None:
    e = Evidence("tensor_active", value, threshold, op)
    assert e.relation() == shown
    assert f" {shown} " in e.describe()
    v = Verdict("memory-bound", 0.9, "gpu:0", (e,), "fix", "summary")
    (j,) = v.to_json()["evidence"]
    assert j["op"] == shown and j["test"] == op


def test_context_only_evidence_has_no_relation() -> None:
    assert Evidence("seq_cap", 8.0).describe() == "seq_cap=8"
    assert Evidence("x", None, 0.5, ">").describe() == "x=n/a > 0.5"
