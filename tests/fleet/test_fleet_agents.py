"""`watch --remote URL --remote URL`: a few agents read straight, without Prometheus, as the
same list and drill-down. Real agents (fake sources at the Source boundary) on 127.0.0.1."""

from __future__ import annotations

import sys
from pathlib import Path

import httpx
import pytest
from textual.widgets import DataTable, Static

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "agent"))
from agent_support import (  # noqa: E402
    FakeEngineSource,
    FakeGpuSource,
    start_agent,
    wait_until,
)

from headroom.cli import main  # noqa: E402
from monitor.fleet.agents import read_agents  # noqa: E402
from monitor.tui.fleet import FleetApp, HostScreen  # noqa: E402

__all__ = ["start_agent"]  # the fixture, used by name

pytestmark = pytest.mark.anyio


def _verdicts(agent_url: str) -> list[tuple[str, str]]:
    report = httpx.get(agent_url + "/api/v1/snapshot", timeout=10).json()
    return sorted((v["cause"], v["scope"]) for v in report["verdicts"])


@pytest.fixture
def two_agents(start_agent) -> tuple[str, str, str]:  # type: ignore[no-untyped-def]
    busy = start_agent([FakeGpuSource(util=0.95, sm_active=0.9), FakeEngineSource(running=8)])
    idle = start_agent([FakeGpuSource(util=0.1, sm_active=0.05), FakeEngineSource(running=1)])
    for agent in (busy, idle):
        wait_until(lambda a=agent: _verdicts(a.url), timeout=20)
    dead = "http://127.0.0.1:9"  # nothing listens on the discard port
    return busy.url, idle.url, dead


def test_read_agents_ranks_them_and_lists_the_one_that_did_not_answer(
    two_agents: tuple[str, str, str],
) -> None:
    busy, idle, dead = two_agents
    fleet = read_agents([busy, dead, idle], timeout=2)
    hosts = [h.instance for h in fleet.hosts]
    assert hosts == [idle.removeprefix("http://"), busy.removeprefix("http://"), "127.0.0.1:9"]
    low, high, gone = fleet.hosts
    assert low.wasted == pytest.approx(0.95) and high.wasted == pytest.approx(0.1)
    assert low.engines[0].running == 1.0 and low.engines[0].kv_cache_usage == 0.25
    assert sorted((v.cause, v.scope) for v in low.verdicts) == _verdicts(idle)
    assert not low.stale and low.last_tick_age_s is not None
    assert gone.stale and not gone.present and gone.gpus == ()
    assert gone.note is not None and gone.note.startswith("http://127.0.0.1:9/api/v1/snapshot: ")


def test_an_agent_behind_basic_auth_that_fails_is_named_without_its_password() -> None:
    (gone,) = read_agents(["http://prom:s3cret@127.0.0.1:9"], timeout=2).hosts
    assert gone.instance == "127.0.0.1:9"
    assert gone.note is not None and gone.note.startswith("http://127.0.0.1:9/api/v1/snapshot: ")
    assert "s3cret" not in gone.note


async def test_the_screen_lists_the_agents_and_opens_one(two_agents: tuple[str, str, str]) -> None:
    busy, idle, dead = two_agents
    app = FleetApp(lambda: read_agents([busy, idle, dead], timeout=2), every=60)
    async with app.run_test(size=(100, 30)) as pilot:
        while app.fleet is None:
            await pilot.pause(0.05)
        await pilot.pause()
        table = app.screen.query_one(DataTable)
        rows = [str(table.get_row_at(i)[0]) for i in range(table.row_count)]
        assert rows == [idle.removeprefix("http://"), busy.removeprefix("http://"),
                        "127.0.0.1:9 (stale)"]  # fmt: skip
        await pilot.press("down", "down", "enter")
        assert isinstance(app.screen, HostScreen)
        detail = str(app.screen.query_one("#host-detail", Static).render())
        assert "127.0.0.1:9/api/v1/snapshot:" in detail and "no GPU series" in detail


def test_one_remote_keeps_the_single_agent_screen(capsys: pytest.CaptureFixture[str]) -> None:
    # Flags are checked before any screen opens: one --remote is the old path, several the list.
    rc = main(["watch", "--remote", "http://127.0.0.1:9", "--remote", "http://127.0.0.1:10",
               "--vllm", "http://x"])  # fmt: skip
    assert rc == 1 and "apply to local sampling only" in capsys.readouterr().err


def test_an_agents_report_gives_each_gpus_power_from_its_energy() -> None:
    from monitor.fleet.agents import host_from_report

    report = {
        "window_s": 10.0,
        "gpus": [
            {"index": 0, "name": "NVIDIA H200", "sm_active": 0.5, "energy_joules": 4000.0},
            {"index": 1, "name": "NVIDIA H200", "sm_active": 0.5, "energy_joules": None},
        ],
        "engines": [{"url": "u", "model_name": "m", "engine": "0", "energy_per_token_joules": 0.2}],
    }
    h = host_from_report("box:9402", report, now=0.0)
    assert [g.power_watts for g in h.gpus] == [400.0, None]
    assert h.power_watts is None  # one GPU unread: no total that reads as the whole
    assert h.engines[0].energy_per_token_joules == 0.2
