"""The fleet's spare capacity through a real Prometheus: two simulated boxes with different
sequence caps, each serving its own steady load and watched by its own agent. The figure
`headroom fleet` reads back through PromQL (rate at each engine's first limit less today's
rate) agrees with what each agent's own snapshot says, per host and in total."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "agent"))
from agent_support import REPO, hostport, sim_agent, wait_until  # noqa: E402
from prometheus_support import HAVE_PROMETHEUS, run_prometheus  # noqa: E402

pytestmark = [
    pytest.mark.prometheus,
    pytest.mark.skipif(not HAVE_PROMETHEUS, reason="needs the prometheus binary"),
]

# (sequence cap, the box's own request rate): short requests, light load on each.
BOXES = ((4, 1.5), (12, 5.0))


def _config(cap: int, rate: float) -> dict[str, Any]:
    return {
        "engine": {"max_num_seqs": cap},
        "load": {"mode": "open", "rate": rate, "prompt_tokens": 128, "prompt_jitter": 0.0,
                 "output_tokens": 128, "output_jitter": 0.0, "initial_requests": 2},
    }  # fmt: skip


@pytest.fixture(scope="module")
def two_boxes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, list[str]]]:
    from simulator import start_sim

    sims, agents = [], []
    try:
        for cap, rate in BOXES:
            sim = start_sim(scenario="starved", port=0, config=_config(cap, rate))
            sims.append(sim)
            agents.append(sim_agent(sim, window=10.0))
        hosts = [hostport(a.url) for a in agents]
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "scrape_configs": [{"job_name": "headroom", "static_configs": [{"targets": hosts}]}],
        }
        with run_prometheus(config, tmp_path_factory.mktemp("spare-prom")) as url:
            yield url, hosts
    finally:
        for agent in agents:
            agent.stop()
        for sim in sims:
            sim.stop()


def _fleet(url: str) -> dict[str, Any] | None:
    run = subprocess.run([sys.executable, "-m", "headroom", "fleet", "--prometheus", url,
                          "--json"], capture_output=True, text=True, timeout=60, cwd=REPO)  # fmt: skip
    return json.loads(run.stdout) if run.returncode == 0 else None


def _own_spare(host: str) -> float | None:
    """rate at the limit - today's rate, from the agent's own snapshot."""
    snap = httpx.get(f"http://{host}/api/v1/snapshot", timeout=10).json()
    total = None
    for e in snap.get("engines") or ():
        at_limit = (e.get("headroom") or {}).get("rate_at_limit_rps")
        if at_limit is None or e.get("requests_per_s") is None:
            return None
        total = (total or 0.0) + at_limit - e["requests_per_s"]
    return total


def test_fleet_spare_capacity_matches_each_agents_own_snapshot(
    two_boxes: tuple[str, list[str]],
) -> None:
    url, hosts = two_boxes

    def ready() -> dict[str, Any] | None:
        doc = _fleet(url)
        if doc is None or {h["instance"] for h in doc["hosts"]} != set(hosts):
            return None
        return doc if all(h["spare_rps"] is not None for h in doc["hosts"]) else None

    wait_until(ready, timeout=90, step=2)
    # The agents' snapshots either side of the fleet's read: their windows slide meanwhile.
    before = {h: _own_spare(h) for h in hosts}
    doc = ready()
    after = {h: _own_spare(h) for h in hosts}
    assert doc is not None
    own = {h: (before[h] + after[h]) / 2 for h in hosts if before[h] and after[h]}
    assert set(own) == set(hosts), (before, after)
    per_host = {h["instance"]: h["spare_rps"] for h in doc["hosts"]}
    # Per host: present and positive (both boxes are below their caps), each engine's too.
    for h in doc["hosts"]:
        assert h["spare_rps"] > 0 and h["engines"][0]["spare_rps"] == h["spare_rps"], h
    # The box with three times the cap has more to spare, as its own agent says.
    big, small = hosts[1], hosts[0]
    assert per_host[big] > per_host[small] and own[big] > own[small]
    assert doc["spare_rps"] == pytest.approx(sum(per_host.values()))
    assert doc["spare_rps"] == pytest.approx(sum(own.values()), rel=0.25), (per_host, own)
