"""Dashboard JSON: generated, consistent, and well-formed for Grafana 11 (Grafana cannot run
here; test_prometheus.py runs every query against a real Prometheus)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from agent_support import REPO

DASH_DIR = REPO / "dashboards"
DASHBOARDS = sorted(DASH_DIR.glob("*.json"))
BUILTINS = {"__rate_interval", "__interval", "__range", "__all"}
PANEL_TYPES = {"row", "timeseries", "stat", "table", "state-timeline"}


def test_committed_json_is_the_generators_output() -> None:
    r = subprocess.run(
        [sys.executable, str(DASH_DIR / "generate.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    assert {p.name for p in DASHBOARDS} == {"headroom-overview.json", "headroom-sweep.json"}


def _overlaps(a: dict[str, int], b: dict[str, int]) -> bool:
    return not (
        a["x"] + a["w"] <= b["x"]
        or b["x"] + b["w"] <= a["x"]
        or a["y"] + a["h"] <= b["y"]
        or b["y"] + b["h"] <= a["y"]
    )


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_dashboard_model_is_valid(path: Path) -> None:
    d: dict[str, Any] = json.loads(path.read_text())
    assert d["uid"] and len(d["uid"]) <= 40 and d["title"]
    assert d["schemaVersion"] >= 39
    variables = {v["name"]: v for v in d["templating"]["list"]}
    assert {"datasource", "instance", "gpu", "model"} <= variables.keys()
    assert (
        variables["datasource"]["type"] == "datasource"
        and variables["datasource"]["query"] == "prometheus"
    )
    for v in variables.values():
        if v["type"] == "query":
            assert v["datasource"]["uid"] == "${datasource}"
            assert v["query"]["query"] == v["definition"]
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids))
    placed: list[dict[str, int]] = []
    for p in d["panels"]:
        assert p["type"] in PANEL_TYPES, p["type"]
        g = p["gridPos"]
        assert g["w"] > 0 and g["h"] > 0 and 0 <= g["x"] and g["x"] + g["w"] <= 24
        assert not any(_overlaps(g, q) for q in placed), p["title"]
        placed.append(g)
        if p["type"] == "row":
            continue
        assert p["title"] and p["datasource"]["uid"] == "${datasource}"
        refs = [t["refId"] for t in p["targets"]]
        assert refs and len(refs) == len(set(refs))
        for t in p["targets"]:
            expr = t["expr"]
            assert expr.count("(") == expr.count(")") and expr.count("{") == expr.count("}")
            for name in re.findall(r"\$\{?(\w+)", expr):
                assert name in variables or name in BUILTINS, (p["title"], name)
        if "repeat" in p:
            assert p["repeat"] in variables and variables[p["repeat"]]["multi"]
    # The overview shows what the issue asks for, on the panels named for it.
    if path.name == "headroom-overview.json":
        by_title = {p["title"]: p for p in d["panels"]}
        gpu = by_title["GPU $gpu: duty cycle vs SM active vs tensor vs DRAM"]
        assert [t["legendFormat"] for t in gpu["targets"]] == [
            "duty cycle",
            "SM active",
            "tensor",
            "DRAM",
        ]
        assert by_title["Diagnosis"]["type"] == "state-timeline"
        assert any(p["type"] == "table" and "Evidence" in p["title"] for p in d["panels"])
        assert any("Roofline" in t for t in by_title)


def test_provisioning_points_at_the_dashboards() -> None:
    prov = yaml.safe_load((DASH_DIR / "provisioning/dashboards/headroom.yml").read_text())
    assert prov["apiVersion"] == 1 and prov["providers"][0]["type"] == "file"
    ds = yaml.safe_load((DASH_DIR / "provisioning/datasources/prometheus.yml").read_text())
    assert ds["datasources"][0]["type"] == "prometheus"
    compose = yaml.safe_load((REPO / "deploy/docker-compose.yml").read_text())
    grafana_mounts = compose["services"]["grafana"]["volumes"]
    path = prov["providers"][0]["options"]["path"]
    assert any(m.startswith("../dashboards:") and m.split(":")[1] == path for m in grafana_mounts)
