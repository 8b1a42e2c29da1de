"""The fleet screen (`headroom watch --prometheus`): Textual's pilot and a snapshot.

The pilot tests read through the real PromQL client from a canned API on 127.0.0.1; the
snapshots draw a fleet assembled from the same canned answers, read once, with no worker.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from fleet_support import Canned, host, serve
from textual.pilot import Pilot
from textual.widgets import DataTable, Static

from monitor.fleet.model import Fleet
from monitor.fleet.promql import PromQL
from monitor.fleet.read import read_fleet
from monitor.tui.fleet import FleetApp, FleetScreen, HostScreen

pytestmark = pytest.mark.anyio

SCOPE = "engine:llama-3.1-70b/0@http://10.0.0.7:8000/metrics"


def canned_fleet() -> Canned:
    canned = Canned()
    host(canned, "gpu-07:9402", [0.05, 0.1, 0.0, 0.02], util=0.3,
         verdicts=[("starved", "box", 0.85)],
         engines=[{"url": "http://10.0.0.7:8000/metrics", "model_name": "llama-3.1-70b",
                   "running": 3.0, "waiting": 0.0, "kv": 0.08, "headroom": 9.5,
                   "limit": "seq-cap", "at_limit": 14.2, "rps": 1.5}])  # fmt: skip
    host(canned, "gpu-03:9402", [0.6, 0.55], util=0.9,
         verdicts=[("seq-cap", SCOPE, 0.95), ("memory-bound", "gpu:0", 0.6)],
         engines=[{"url": "http://10.0.0.7:8000/metrics", "model_name": "llama-3.1-70b",
                   "running": 64.0, "waiting": 31.0, "kv": 0.41, "headroom": 1.0,
                   "limit": "seq-cap", "at_limit": 9.1, "rps": 9.1}])  # fmt: skip
    host(canned, "gpu-11:9402", [None], util=0.7, age=600.0,
         verdicts=[("compute-bound", "box", 0.9)])  # fmt: skip
    return canned


def read_once(canned: Canned) -> Fleet:
    with serve(canned) as url, PromQL(url) as client:
        return read_fleet(client)


@asynccontextmanager
async def fleet_app(
    canned: Canned, size: tuple[int, int] = (100, 30), price: float | None = None
) -> AsyncIterator[tuple[FleetApp, Pilot]]:
    """The fleet screen reading ``canned`` through the real PromQL client, once it has read."""
    with serve(canned) as url, PromQL(url) as client:

        def read() -> Fleet:
            fleet = read_fleet(client)
            return fleet if price is None else fleet.priced(price)

        app = FleetApp(read, every=60, source=url)
        async with app.run_test(size=size) as pilot:
            while app.fleet is None:
                await pilot.pause(0.05)
            yield app, pilot


def table_hosts(app: FleetApp) -> list[str]:
    table = app.screen.query_one(DataTable)
    return [str(table.get_row_at(i)[0]) for i in range(table.row_count)]


async def test_the_worker_reads_ranks_and_drills_down() -> None:
    canned = canned_fleet()
    async with fleet_app(canned) as (app, pilot):
        await pilot.pause()
        assert table_hosts(app) == ["gpu-07:9402", "gpu-03:9402", "gpu-11:9402 (stale)"]
        await pilot.press("down", "enter")
        assert isinstance(app.screen, HostScreen) and app.screen.instance == "gpu-03:9402"
        detail = str(app.screen.query_one("#host-detail", Static).render())
        assert "seq-cap (0.95)" in detail and "memory-bound (0.60)" in detail
        assert "1.0x seq-cap" in detail and "31.0" in detail
        await pilot.press("escape")
        assert isinstance(app.screen, FleetScreen)
        # r reads again now, not at the next period; the cursor stays on its host.
        asked = len(canned.asked)
        await pilot.press("r")
        while len(canned.asked) == asked or app.reads < 2:
            await pilot.pause(0.05)
        await pilot.pause()
        assert app.screen.selected() == "gpu-03:9402"


async def test_a_failed_read_keeps_the_last_fleet_and_says_why() -> None:
    canned = canned_fleet()
    async with fleet_app(canned) as (app, pilot):
        canned.mode = "promql-error"
        await pilot.press("r")
        while app.error is None:
            await pilot.pause(0.05)
        await pilot.pause()
        assert len(table_hosts(app)) == 3
        status = app.status_line()
        assert "rejected a query (bad_data" in status and "showing the last answer" in status


def test_fleet_screen(snap_compare, utc: None) -> None:  # type: ignore[no-untyped-def]
    fleet = read_once(canned_fleet())
    app = FleetApp(lambda: fleet, autostart=False, source="http://prometheus:9090")
    assert snap_compare(app, terminal_size=(100, 16))


def test_host_screen(snap_compare, utc: None) -> None:  # type: ignore[no-untyped-def]
    fleet = read_once(canned_fleet())
    app = FleetApp(lambda: fleet, autostart=False, source="http://prometheus:9090")
    assert snap_compare(app, terminal_size=(100, 24), press=["down", "enter"])


async def test_with_a_price_the_fleet_screen_shows_the_waste_in_money() -> None:
    canned = canned_fleet()
    host(canned, "gpu-20:9402", [0.5, 0.5], watts=350.0)
    async with fleet_app(canned, size=(140, 30), price=2.0) as (app, pilot):
        await pilot.pause()
        # gpu-07 wastes 3.83 GPUs: $7.66 an hour at $2.00; the fleet 5.68 GPUs.
        assert "5.7 GPUs wasted ($11.36 an hour)" in app.status_line()
        table = app.screen.query_one(DataTable)
        rows = {str(table.get_row_at(i)[0]): table.get_row_at(i) for i in range(3)}
        assert rows["gpu-07:9402"][-2] == "$7.66"
        assert rows["gpu-20:9402"][-1] == "700 W"
        assert table_hosts(app)[1] == "gpu-20:9402"
        await pilot.press("down", "enter")
        detail = str(app.screen.query_one("#host-detail", Static).render())
        assert "wasted 1.0 GPU ($2.00 an hour), drawing 700 W" in detail
