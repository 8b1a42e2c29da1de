"""Three real agents, each watching its own simulator, scraped by one real Prometheus; then
`headroom fleet` reads them back through the CLI, as a user with a fleet would."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "agent"))
from agent_support import REPO, wait_until  # noqa: E402
from prometheus_support import HAVE_PROMETHEUS, run_prometheus  # noqa: E402

from monitor.agent import Agent  # noqa: E402
from monitor.config import AgentConfig  # noqa: E402

pytestmark = [
    pytest.mark.prometheus,
    pytest.mark.skipif(not HAVE_PROMETHEUS, reason="needs the prometheus binary"),
]

# One box that idles, one whose engine waits at its sequence cap, one whose GPU is saturated.
SCENARIOS = ("idle", "seq-cap", "compute-bound")


def _hostport(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.hostname}:{parts.port}"


@pytest.fixture(scope="module")
def fleet_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict]]:
    from simulator import start_sim

    sims, agents = [], []
    try:
        for scenario in SCENARIOS:
            sim = start_sim(scenario=scenario, port=0)
            sims.append(sim)
            agent = Agent(
                AgentConfig(
                    listen="127.0.0.1:0",
                    vllm=(sim.url,),
                    dcgm_exporter=sim.gpu_metrics_url,
                    nvml=False,
                    interval=0.5,
                    window=4.0,
                    pids=(sim.pid,),
                )
            )
            agent.start()
            agents.append(agent)
        hosts = {_hostport(a.url): s for a, s in zip(agents, SCENARIOS)}
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "scrape_configs": [
                {"job_name": "headroom", "static_configs": [{"targets": list(hosts)}]},
            ],
        }
        with run_prometheus(config, tmp_path_factory.mktemp("fleet-prom")) as url:
            yield url, hosts
    finally:
        for agent in agents:
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
    return doc


def test_fleet_reads_three_agents_through_prometheus(fleet_prometheus: tuple[str, dict]) -> None:
    url, hosts = fleet_prometheus
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
    # The table says the same in words: every host listed, the seq-cap engine's verdict.
    table = _fleet(url)
    assert table.returncode == 0, table.stderr
    for instance in hosts:
        assert instance in table.stdout
    assert "seq-cap" in table.stdout
