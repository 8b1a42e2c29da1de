"""`headroom fleet` over canned PromQL answers from a real HTTP server on 127.0.0.1: ranking
by wasted GPU, readings that are missing shown as missing, stale hosts, what it asks."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fleet_support import EVAL_TIME, Canned, host, serve

from headroom.cli import main


def fleet(capsys: pytest.CaptureFixture[str], url: str, *args: str) -> tuple[int, str, str]:
    rc = main(["fleet", "--prometheus", url, *args])
    out, err = capsys.readouterr()
    return rc, out, err


def fleet_json(capsys: pytest.CaptureFixture[str], canned: Canned, *args: str) -> dict[str, Any]:
    with serve(canned) as url:
        rc, out, err = fleet(capsys, url, "--json", *args)
    assert rc == 0, err
    return json.loads(out)


# (case, hosts as (instance, sm per GPU), expected order, expected wasted per host)
RANKING = [
    (
        "more GPUs idle outrank one idle GPU",
        [("one-idle", [0.0]), ("eight-half", [0.5] * 8), ("two-busy", [0.9, 0.95])],
        ["eight-half", "one-idle", "two-busy"],
        [4.0, 1.0, 0.15],
    ),
    (
        "a host without any SM reading ranks last, not as fully busy or fully idle",
        [("no-gpm", [None, None]), ("busy", [0.99]), ("idle", [0.0, 0.0])],
        ["idle", "busy", "no-gpm"],
        [2.0, 0.01, None],
    ),
    (
        "a GPU without SM reading adds nothing to its host's waste",
        [("mixed", [0.0, None, None]), ("two", [0.5, 0.5])],
        ["mixed", "two"],
        [1.0, 1.0],
    ),
]


@pytest.mark.parametrize(("case", "hosts", "order", "wasted"), RANKING, ids=[r[0] for r in RANKING])
def test_hosts_are_ranked_by_wasted_gpu(
    capsys: pytest.CaptureFixture[str],
    case: str,
    hosts: list[tuple[str, list[float | None]]],
    order: list[str],
    wasted: list[float | None],
) -> None:
    canned = Canned()
    for instance, sm in hosts:
        host(canned, instance, sm)
    doc = fleet_json(capsys, canned)
    assert [h["instance"] for h in doc["hosts"]] == order
    got = [h["wasted_gpus"] for h in doc["hosts"]]
    assert got == [pytest.approx(w) if w is not None else None for w in wasted]


def test_missing_readings_are_null_and_dashes_not_zero(capsys: pytest.CaptureFixture[str]) -> None:
    canned = Canned()
    # GPM-less box: duty cycle read, SM activity not; its engine exports no KV gauge (TGI).
    host(canned, "old-box:9402", [None], util=0.4,
         engines=[{"running": 3.0, "waiting": 0.0}])  # fmt: skip
    doc = fleet_json(capsys, canned)
    h = doc["hosts"][0]
    assert h["gpus"] == [{"gpu": "0", "model": "NVIDIA H200", "util": 0.4, "sm_active": None,
                          "wasted": None, "power_watts": None}]  # fmt: skip
    assert h["wasted_gpus"] is None and h["gpus_without_sm_active"] == 1
    assert h["engines"][0]["kv_cache_usage"] is None and h["engines"][0]["running"] == 3.0
    assert h["cause"] is None and h["verdicts"] == []
    with serve(canned) as url:
        rc, out, _ = fleet(capsys, url)
    assert rc == 0
    host_row = next(line for line in out.splitlines() if line.startswith("old-box:9402"))
    cells = host_row.split()
    # wasted, cause, confidence, duty, SM, running, waiting, KV, spare, $/hour, power, J/token
    assert cells[1:] == ["-", "-", "-", "40%", "-", "3.0", "0.0", "-", "-", "-", "-", "-"]


def test_the_headline_cause_is_the_one_the_agent_leads_with(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The simulator's starved box: its GPU reads memory-bound with more confidence (0.90) than
    # the engine's starved (0.85), and the diagnosis leads with starved (more load is the fix;
    # the busy GPU is what light decode looks like). The fleet says what snapshot says.
    canned = Canned()
    scope = "engine:m/0@http://127.0.0.1:8000/metrics"
    host(canned, "box-a", [0.77], verdicts=[("starved", scope, 0.85), ("memory-bound", "gpu:0", 0.9)],
         ranked=True)  # fmt: skip
    h = fleet_json(capsys, canned)["hosts"][0]
    assert (h["cause"], h["confidence"]) == ("starved", 0.85)
    assert [(v["cause"], v["rank"]) for v in h["verdicts"]] == [("starved", 0), ("memory-bound", 1)]


def test_verdicts_engines_and_the_headline_cause(capsys: pytest.CaptureFixture[str]) -> None:
    canned = Canned()
    scope = "engine:m/0@http://127.0.0.1:8000/metrics"
    host(canned, "box-a", [0.2, 0.3],
         verdicts=[("memory-bound", "gpu:0", 0.6), ("seq-cap", scope, 0.95)],
         engines=[{"running": 64.0, "waiting": 20.0, "kv": 0.4, "headroom": 1.0,
                   "limit": "seq-cap"}])  # fmt: skip
    doc = fleet_json(capsys, canned)
    h = doc["hosts"][0]
    assert (h["cause"], h["confidence"]) == ("seq-cap", 0.95)
    assert [v["cause"] for v in h["verdicts"]] == ["seq-cap", "memory-bound"]
    assert h["engines"] == [{"url": "http://127.0.0.1:8000/metrics", "model_name": "m",
                             "engine": "0", "running": 64.0, "waiting": 20.0,
                             "kv_cache_usage": 0.4, "headroom_factor": 1.0,
                             "first_limit": "seq-cap", "energy_per_token_joules": None,
                             "spare_rps": None}]  # fmt: skip
    with serve(canned) as url:
        _, out, _ = fleet(capsys, url)
    lines = out.splitlines()
    assert lines[0].endswith("1 host, 2 GPUs, 1 engine; 1.5 GPUs wasted (GPUs x (1 - SM active))")
    engine_row = next(line for line in lines if line.startswith("  m/0"))
    assert engine_row.split() == ["m/0", "seq-cap", "0.95", "64.0", "20.0", "40%", "-"]
    gpu0 = next(line for line in lines if line.startswith("  gpu 0"))
    assert "memory-bound" in gpu0 and "20%" in gpu0


def test_stale_hosts_are_marked(capsys: pytest.CaptureFixture[str]) -> None:
    canned = Canned()
    host(canned, "fresh", [0.5], age=5.0)
    host(canned, "slow", [0.5], age=300.0)
    host(canned, "gone", [0.5], age=None)
    doc = fleet_json(capsys, canned)
    stale = {h["instance"]: h["stale"] for h in doc["hosts"]}
    assert stale == {"fresh": False, "slow": True, "gone": True}
    longer = fleet_json(capsys, canned, "--stale-after", "600")["hosts"]
    assert {h["instance"]: h["stale"] for h in longer} == {
        "fresh": False,
        "slow": False,
        "gone": True,
    }
    with serve(canned) as url:
        _, out, _ = fleet(capsys, url)
    assert "slow (stale)" in out and "last tick 300 s ago" in out
    assert "gone (stale)" in out and "no tick from its agent in the last hour" in out
    assert "fresh (stale)" not in out and "2 stale" in out.splitlines()[0]


def test_it_asks_few_aggregated_queries_narrowed_by_the_selector(
    capsys: pytest.CaptureFixture[str],
) -> None:
    canned = Canned()
    host(canned, "a", [0.5])
    fleet_json(capsys, canned, "--selector", 'job="headroom",env=~"prod.*"', "--host-label", "box")
    queries = [a["form"]["query"][0] for a in canned.asked]
    # One query per family, however many hosts: never one per host.
    assert 5 <= len(queries) <= 14
    assert all(a["path"] == "/api/v1/query" for a in canned.asked)
    for q in queries:
        assert 'job="headroom",env=~"prod.*"' in q, q
        assert q.startswith("max by (box") or q.startswith("time() - max by (box)"), q


def test_at_evaluates_at_a_given_time(capsys: pytest.CaptureFixture[str]) -> None:
    canned = Canned()
    host(canned, "a", [0.5])
    doc = fleet_json(capsys, canned, "--at", "2026-01-15T10:00:00Z")
    assert {a["form"]["time"][0] for a in canned.asked} == {"1768471200.000"}
    assert doc["time"] == 1768471200.0
    assert fleet_json(capsys, Canned(series=canned.series))["time"] == EVAL_TIME


@pytest.mark.parametrize(
    ("env", "header"),
    [
        ({"HEADROOM_PROMETHEUS_TOKEN": "s3cret-token"}, "Bearer s3cret-token"),
        (
            {"HEADROOM_PROMETHEUS_USER": "ops", "HEADROOM_PROMETHEUS_PASSWORD": "s3cret-pw"},
            "Basic b3BzOnMzY3JldC1wdw==",
        ),  # fmt: skip
    ],
)
def test_credentials_come_from_the_environment_and_are_never_printed(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    env: dict[str, str],
    header: str,
) -> None:
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("HEADROOM_PROMETHEUS_ORG_ID", "tenant-1")
    canned = Canned()
    host(canned, "a", [0.5])
    with serve(canned) as url:
        rc, out, err = fleet(capsys, url, "--json")
        assert rc == 0
        canned.mode = "401"
        rc401, out401, err401 = fleet(capsys, url)
    assert {a["headers"].get("Authorization") for a in canned.asked} == {header}
    assert {a["headers"].get("X-Scope-OrgID") for a in canned.asked} == {"tenant-1"}
    assert rc401 == 1 and "refused the query: HTTP 401" in err401
    for text in (out, err, out401, err401):
        assert "s3cret" not in text


def test_two_servers_of_one_model_on_a_box_are_told_apart(
    capsys: pytest.CaptureFixture[str],
) -> None:
    canned = Canned()
    host(canned, "box", [0.5, 0.5], engines=[
        {"url": "http://127.0.0.1:8000/metrics", "running": 1.0},
        {"url": "http://127.0.0.1:8001/metrics", "running": 7.0},
    ])  # fmt: skip
    with serve(canned) as url:
        _, out, _ = fleet(capsys, url)
    rows = [line.split() for line in out.splitlines() if line.startswith("  m/0")]
    assert rows == [["m/0", ":8000", "1.0", "-", "-", "-"], ["m/0", ":8001", "7.0", "-", "-", "-"]]


def test_wasted_gpus_as_money_with_power_and_energy_per_token(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    canned = Canned()
    host(canned, "half-idle", [0.5] * 8, watts=300.0,
         engines=[{"running": 10.0, "j_per_token": 0.25}])  # fmt: skip
    host(canned, "busy", [0.9], watts=650.0)
    doc = fleet_json(capsys, canned, "--gpu-hour-price", "2.5")
    half, busy = doc["hosts"]
    assert doc["gpu_hour_price"] == 2.5
    assert half["wasted_cost_per_hour"] == pytest.approx(10.0)  # 4 GPUs wasted x $2.50
    assert busy["wasted_cost_per_hour"] == pytest.approx(0.25)
    assert doc["wasted_cost_per_hour"] == pytest.approx(10.25)
    assert half["power_watts"] == pytest.approx(2400.0)
    assert half["engines"][0]["energy_per_token_joules"] == 0.25
    with serve(canned) as url:
        monkeypatch.setenv("HEADROOM_GPU_HOUR_PRICE", "2.5")
        rc, out, _ = fleet(capsys, url)
    assert rc == 0
    assert "$10.25 an hour at $2.50/GPU-hour" in out.splitlines()[0]
    row = next(line for line in out.splitlines() if line.startswith("half-idle"))
    assert "$10.00" in row and "2400 W" in row and "0.250" in row
    # Without a price: the GPUs, no money.
    monkeypatch.delenv("HEADROOM_GPU_HOUR_PRICE")
    doc = fleet_json(capsys, canned)
    assert doc["hosts"][0]["wasted_cost_per_hour"] is None


def test_spare_capacity_per_engine_host_and_fleet(capsys: pytest.CaptureFixture[str]) -> None:
    # Box a: two engines with 3 and 1.5 req/s to spare; box b past its limit (-0.5); box c's
    # engine finished nothing, so it has no rate at its limit: a dash, and nothing added.
    canned = Canned()
    host(canned, "a", [0.5], engines=[
        {"url": "http://127.0.0.1:8000/metrics", "running": 4.0, "at_limit": 4.0, "rps": 1.0},
        {"url": "http://127.0.0.1:8001/metrics", "running": 2.0, "at_limit": 2.0, "rps": 0.5},
    ])  # fmt: skip
    host(canned, "b", [0.9], engines=[{"running": 8.0, "at_limit": 3.0, "rps": 3.5}])
    host(canned, "c", [0.1], engines=[{"running": 0.0, "rps": 0.0}])
    doc = fleet_json(capsys, canned)
    by_host = {h["instance"]: h for h in doc["hosts"]}
    assert by_host["a"]["spare_rps"] == pytest.approx(4.5)
    assert [e["spare_rps"] for e in by_host["a"]["engines"]] == pytest.approx([3.0, 1.5])
    assert by_host["b"]["spare_rps"] == pytest.approx(-0.5)
    assert by_host["c"]["spare_rps"] is None
    assert doc["spare_rps"] == pytest.approx(4.0)
    with serve(canned) as url:
        _, out, _ = fleet(capsys, url)
    lines = out.splitlines()
    assert "4.00 req/s spare" in lines[0]
    assert "SPARE/S" in lines[1]
    row = {line.split()[0]: line.split() for line in lines[2:] if line and line[0] != " "}
    # wasted, cause, confidence, duty, SM, running, waiting, KV, spare, ...
    assert row["a"][9] == "4.50" and row["b"][9] == "-0.50" and row["c"][9] == "-"
