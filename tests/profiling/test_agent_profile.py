"""POST /api/v1/profile on the agent: refused unless --allow-profile, behind the same auth."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import bcrypt
import httpx
from agent_support import start_agent, wait_until

from monitor.sources.host import HostSource

__all__ = ["start_agent"]

BURN = "import threading\ndef spin():\n    while True:\n        sum(range(10000))\nspin()\n"


def post(url: str, **kw: object) -> httpx.Response:
    return httpx.post(url, timeout=60.0, **kw)  # type: ignore[arg-type]


def test_refused_without_allow_profile(start_agent) -> None:
    agent = start_agent([])
    r = post(agent.url + "/api/v1/profile?seconds=1")
    assert r.status_code == 403 and "--allow-profile" in r.json()["error"]


def test_refused_without_credentials_where_auth_is_on(start_agent, tmp_path: Path) -> None:
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode()
    web = tmp_path / "web.yml"
    web.write_text(f"basic_auth_users:\n  prom: {hashed}\n")
    agent = start_agent([], web_config=str(web), allow_profile=True)
    assert post(agent.url + "/api/v1/profile?seconds=1").status_code == 401
    assert post(agent.url + "/api/v1/profile?seconds=1", auth=("prom", "no")).status_code == 401
    # With credentials it gets past auth: there is no engine process, so a refusal in words.
    r = post(agent.url + "/api/v1/profile?seconds=1", auth=("prom", "s3cret"))
    assert r.status_code == 422 and "no engine process" in r.json()["error"]


def test_allowed_it_profiles_the_hot_thread(start_agent) -> None:
    p = subprocess.Popen([sys.executable, "-c", BURN])
    try:
        time.sleep(1.0)  # past the interpreter's start-up
        agent = start_agent([HostSource(pids=[p.pid])], allow_profile=True, profile_every=0)
        wait_until(lambda: (agent.monitor.window() or None) and agent.monitor.window().host)
        wait_until(lambda: agent.monitor.window().host.busiest_thread is not None)
        r = post(agent.url + "/api/v1/profile?seconds=2")
        assert r.status_code == 200, r.text
        prof = r.json()["cpu_profile"]
        assert prof["pid"] == p.pid and prof["samples"] >= 20
        assert prof["functions"][0]["function"] == "spin"
        # The next snapshot carries it too.
        wait_until(
            lambda: httpx.get(agent.url + "/api/v1/snapshot").json().get("cpu_profile") is not None
        )
        assert post(agent.url + "/api/v1/profile?seconds=abc").status_code == 400
    finally:
        p.kill()
        p.wait()
