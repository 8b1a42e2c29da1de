"""The alerting rules carry the diagnosis's thresholds by hand: check they still match.

Each alert's comment names the thresholds it uses with their values, e.g.
``util_low (0.5)``. Every such name must be a field of the diagnosis's Thresholds
with that default, and the value (or 1 minus it, for a tolerance below a cap) must
stand in the alert's expression: changing a default, or an expression, without the
other fails here.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import yaml

from monitor.diagnosis.thresholds import Thresholds

RULES = (
    Path(__file__).resolve().parents[2] / "configs" / "prometheus" / "rules" / "headroom-alerts.yml"
)
NAMED = re.compile(r"\b([a-z][a-z_]+) \((\d+(?:\.\d+)?)\)")
LITERAL = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)(?![\w.])")


def _documented() -> dict[str, list[tuple[str, float]]]:
    """alert name -> [(threshold, value)] from the comment block above it."""
    out: dict[str, list[tuple[str, float]]] = {}
    comment: list[str] = []
    for line in RULES.read_text().splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            comment.append(stripped)
            continue
        m = re.match(r"- alert: (\w+)", stripped)
        if m:
            out[m.group(1)] = [(n, float(v)) for n, v in NAMED.findall(" ".join(comment))]
        comment = []
    return out


def _exprs() -> dict[str, str]:
    doc = yaml.safe_load(RULES.read_text())
    return {r["alert"]: r["expr"] for g in doc["groups"] for r in g["rules"] if "alert" in r}


DOCUMENTED = _documented()
DEFAULTS = {f.name: f.default for f in dataclasses.fields(Thresholds)}


def test_every_diagnosis_alert_documents_its_thresholds() -> None:
    for alert in _exprs():
        if alert == "HeadroomAgentDown":
            continue
        assert DOCUMENTED.get(alert), f"{alert}: no 'name (value)' thresholds in its comment"


@pytest.mark.parametrize("alert", sorted(a for a, pairs in DOCUMENTED.items() if pairs))
def test_documented_thresholds_are_the_diagnosis_defaults(alert: str) -> None:
    expr = _exprs()[alert]
    literals = {float(x) for x in LITERAL.findall(expr)}
    for name, value in DOCUMENTED[alert]:
        assert name in DEFAULTS, f"{alert}: {name} is not a diagnosis threshold"
        assert DEFAULTS[name] == pytest.approx(value), (
            f"{alert}: the comment says {name} ({value}), the diagnosis uses {DEFAULTS[name]}"
        )
        assert any(abs(x - value) < 1e-9 or abs(x - (1 - value)) < 1e-9 for x in literals), (
            f"{alert}: {name} ({value}) is not in its expression"
        )
