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

# (sequence cap, the box's own request rate): short requests, light load on each, about an
# eighth of each cap. The engines sleep their host work rather than burn it (cpu_scale 0):
# on a loaded machine (CI, load average over 10) a burning engine thread gets a sliver of a
# core, its steps take several times longer and both boxes sit near a limit that swings
# read to read, which is not what this test is about.
BOXES = ((4, 0.5), (12, 1.5))


def _config(cap: int, rate: float) -> dict[str, Any]:
    return {
        "engine": {"max_num_seqs": cap, "cpu_scale": 0.0},
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


def _own(host: str) -> tuple[float | None, float]:
    """rate at the limit - today's rate, from the agent's own snapshot, and its window."""
    snap = httpx.get(f"http://{host}/api/v1/snapshot", timeout=10).json()
    total = None
    for e in snap.get("engines") or ():
        at_limit = (e.get("headroom") or {}).get("rate_at_limit_rps")
        if at_limit is None or e.get("requests_per_s") is None:
            return None, snap.get("window_s") or 0.0
        total = (total or 0.0) + at_limit - e["requests_per_s"]
    return total, snap.get("window_s") or 0.0


def _read(url: str, hosts: list[str]) -> tuple[dict[str, Any] | None, dict[str, float]]:
    """The fleet's figures, and each agent's own read either side of them (their windows
    slide meanwhile: the mean of the two), once every agent's window is full."""
    before = {h: _own(h) for h in hosts}
    doc = _fleet(url)
    after = {h: _own(h) for h in hosts}
    own = {
        h: (before[h][0] + after[h][0]) / 2
        for h in hosts
        if before[h][0] is not None and after[h][0] is not None
    }
    full = all(w >= 9.0 for _, w in (*before.values(), *after.values()))
    if doc is None or set(own) != set(hosts) or not full:
        return None, own
    if {h["instance"] for h in doc["hosts"]} != set(hosts):
        return None, own
    if any(h["spare_rps"] is None for h in doc["hosts"]):
        return None, own
    return doc, own


def _agrees(doc: dict[str, Any], own: dict[str, float]) -> bool:
    return doc["spare_rps"] == pytest.approx(sum(own.values()), rel=0.25)


def test_fleet_spare_capacity_matches_each_agents_own_snapshot(
    two_boxes: tuple[str, list[str]],
) -> None:
    url, hosts = two_boxes
    doc, own = wait_until(lambda: (r := _read(url, hosts))[0] is not None and r, 120, step=2)
    # Prometheus holds the agents' figures of up to a scrape ago and the agents' windows
    # slide between reads: on a machine that stalls for seconds a read can straddle a
    # stall. A few reads; the last is checked.
    for _ in range(3):
        if _agrees(doc, own):
            break
        doc, own = wait_until(lambda: (r := _read(url, hosts))[0] is not None and r, 60, step=1)
    per_host = {h["instance"]: h["spare_rps"] for h in doc["hosts"]}
    # Per host: present and positive (both boxes are below their caps), each engine's too.
    for h in doc["hosts"]:
        assert h["spare_rps"] > 0 and h["engines"][0]["spare_rps"] == h["spare_rps"], h
    # The box with three times the cap has more to spare, as its own agent says.
    big, small = hosts[1], hosts[0]
    assert per_host[big] > per_host[small] and own[big] > own[small], (per_host, own)
    assert doc["spare_rps"] == pytest.approx(sum(per_host.values()))
    assert _agrees(doc, own), (per_host, own)
