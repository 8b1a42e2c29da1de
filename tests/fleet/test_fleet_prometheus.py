"""Three real agents, each watching its own simulator, scraped by one real Prometheus; then
`headroom fleet` reads them back through the CLI, as a user with a fleet would. One agent is
its own process (`headroom agent`), killed at the end: a dead agent stays listed, as stale."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "agent"))
from agent_support import REPO, hostport, sim_agent, wait_until  # noqa: E402
from prometheus_support import HAVE_PROMETHEUS, free_port, run_prometheus  # noqa: E402

from monitor.serve.agent import Agent  # noqa: E402

pytestmark = [
    pytest.mark.prometheus,
    pytest.mark.skipif(not HAVE_PROMETHEUS, reason="needs the prometheus binary"),
]

# One box that idles, one whose engine waits at its sequence cap, one whose GPU is saturated.
SCENARIOS = ("idle", "seq-cap", "compute-bound")


class Fleet:
    def __init__(self, url: str, hosts: dict[str, str], process: subprocess.Popen) -> None:
        self.url, self.hosts, self.process = url, hosts, process


@pytest.fixture(scope="module")
def fleet_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    from simulator import start_sim

    sims, agents = [], []
    process: subprocess.Popen | None = None
    try:
        for scenario in SCENARIOS:
            sim = start_sim(scenario=scenario, port=0)
            sims.append(sim)
            if scenario == "idle":
                port = free_port()
                process = subprocess.Popen(
                    [sys.executable, "-m", "headroom", "agent", "--listen", f"127.0.0.1:{port}",
                     "--vllm", sim.url, "--dcgm-exporter", sim.gpu_metrics_url, "--no-nvml",
                     "--interval", "0.5", "--window", "4"],
                    cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                )  # fmt: skip
                agents.append(f"127.0.0.1:{port}")
                continue
            agents.append(sim_agent(sim))
        hosts = {a if isinstance(a, str) else hostport(a.url): s for a, s in zip(agents, SCENARIOS)}
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "scrape_configs": [
                {"job_name": "headroom", "static_configs": [{"targets": list(hosts)}]},
            ],
        }
        with run_prometheus(config, tmp_path_factory.mktemp("fleet-prom")) as url:
            assert process is not None
            yield Fleet(url, hosts, process)
    finally:
        if process is not None:
            process.kill()
            process.wait()
        for agent in agents:
            if isinstance(agent, Agent):
                agent.stop()
        for sim in sims:
            sim.stop()


def _fleet(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "headroom", "fleet", "--prometheus", url, *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )


def _ready(url: str, hosts: dict[str, str]) -> dict[str, Any] | None:
    """The fleet once every host has a GPU SM reading and seq-cap is diagnosed."""
    run = _fleet(url, "--json", "--selector", 'job="headroom"')
    if run.returncode != 0:
        return None
    doc = json.loads(run.stdout)
    by_host = {h["instance"]: h for h in doc["hosts"]}
    if set(by_host) != set(hosts):
        return None
    if any(h["wasted_gpus"] is None or not h["engines"] for h in by_host.values()):
        return None
    seq_cap_host = next(i for i, s in hosts.items() if s == "seq-cap")
    if "seq-cap" not in {v["cause"] for v in by_host[seq_cap_host]["verdicts"]}:
        return None
    # Each agent's window fills on its own clock: until the saturated box's window holds its
    # load, its GPU reads idler than the seq-cap box's (a CI run ranked it second).
    busy_host = next(i for i, s in hosts.items() if s == "compute-bound")
    if by_host[busy_host]["wasted_gpus"] >= by_host[seq_cap_host]["wasted_gpus"]:
        return None
    return doc


def test_fleet_reads_three_agents_through_prometheus(fleet_prometheus: Fleet) -> None:
    url, hosts = fleet_prometheus.url, fleet_prometheus.hosts
    doc = wait_until(lambda: _ready(url, hosts), timeout=90, step=2)
    scenario = {h["instance"]: hosts[h["instance"]] for h in doc["hosts"]}
    order = [scenario[h["instance"]] for h in doc["hosts"]]
    # The saturated box wastes least, so it comes last; the idle box wastes most.
    assert order[0] == "idle" and order[-1] == "compute-bound", order
    wasted = [h["wasted_gpus"] for h in doc["hosts"]]
    assert wasted == sorted(wasted, reverse=True)
    for h in doc["hosts"]:
        assert not h["stale"], h
        assert h["gpus"] and all(0 <= g["sm_active"] <= 1 for g in h["gpus"])
        assert h["verdicts"] and h["cause"] == h["verdicts"][0]["cause"]
    seq = next(h for h in doc["hosts"] if scenario[h["instance"]] == "seq-cap")
    engine = seq["engines"][0]
    assert engine["running"] > 0 and engine["waiting"] > 0
    # Each GPU's power from its energy counter through Prometheus: the simulated H100 draws
    # its 70 W idle floor at rest and more at work, never past its 700 W TDP.
    # (A rate needs two scrapes of the counter: wait for them.)

    def powers() -> dict[str, float] | None:
        got = json.loads(_fleet(url, "--json").stdout)["hosts"]
        power = {scenario[h["instance"]]: h["power_watts"] for h in got}
        return power if all(v is not None for v in power.values()) else None

    power = wait_until(powers, timeout=30, step=1)
    assert power["idle"] == pytest.approx(70.0, rel=0.05), power
    assert 70.0 < power["seq-cap"] < 700.0 and 70.0 < power["compute-bound"] < 700.0, power
    assert engine["energy_per_token_joules"] > 0
    priced = json.loads(_fleet(url, "--json", "--gpu-hour-price", "2").stdout)
    idle_host = next(h for h in priced["hosts"] if scenario[h["instance"]] == "idle")
    assert idle_host["wasted_cost_per_hour"] == pytest.approx(2.0)  # a whole idle GPU
    # The table says the same in words: every host listed, the seq-cap engine's verdict.
    table = _fleet(url)
    assert table.returncode == 0, table.stderr
    for instance in hosts:
        assert instance in table.stdout
    assert "seq-cap" in table.stdout
    # The idle box's agent dies: Prometheus ends its series at the failed scrape, and the
    # fleet lists the host as stale with no readings rather than dropping it.
    idle = next(i for i, s in hosts.items() if s == "idle")
    fleet_prometheus.process.kill()

    def gone() -> dict[str, Any] | None:
        run = _fleet(url, "--json")
        doc = json.loads(run.stdout) if run.returncode == 0 else {"hosts": []}
        h = next((h for h in doc["hosts"] if h["instance"] == idle), None)
        return h if h is not None and not h["present"] else None

    h = wait_until(gone, timeout=30, step=1)
    assert h["stale"] and h["gpus"] == [] and h["wasted_gpus"] is None
    assert h["last_tick_age_s"] is not None and h["last_tick_age_s"] < 60
