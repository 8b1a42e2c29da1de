"""The GPU power Prometheus reads from the agent's energy counter (the dashboard's power panel
and `headroom fleet` take its irate) is the power between two readings, however late the
agent's tick ran before a scrape. The counter is stamped with its reading's time: unstamped,
a reading taken 0.4 s before one scrape and just before the next read as 1.8x the power."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from agent_support import View, wait_until
from prometheus_client import start_http_server
from prometheus_support import HAVE_PROMETHEUS, free_port, run_prometheus

from monitor.serve.exporter import SelfStats, build_registry
from monitor.sources.samples import GpuSample, Snapshot
from monitor.window.full import compute_window
from monitor.window.stats import WindowStats

pytestmark = [
    pytest.mark.prometheus,
    pytest.mark.skipif(not HAVE_PROMETHEUS, reason="needs the prometheus binary"),
]

WATTS = 300.0
SCRAPE_S = 0.5


class LateTicks(View):
    """A GPU drawing a steady 300 W whose newest reading, at each scrape, was taken a random
    0-90% of a scrape interval earlier (an agent whose ticks drift against the scrapes)."""

    def __init__(self) -> None:
        super().__init__(None, None)
        self.start = time.time()
        self.lags = random.Random(7)
        self.lock = threading.Lock()

    def window(self) -> WindowStats | None:
        with self.lock:
            read = time.time() - self.lags.uniform(0.0, 0.9 * SCRAPE_S)

        def at(wall: float) -> Snapshot:
            joules = WATTS * (wall - self.start)
            gpu = GpuSample(0, "GPU-a", "NVIDIA H200", "nvml", energy_joules=joules,
                            energy_source="counter")  # fmt: skip
            return Snapshot(t=wall, wall=wall, gpus=(gpu,))

        return compute_window([at(read - 1.0), at(read)])


@pytest.fixture
def prometheus_on_late_ticks(tmp_path: Path) -> Iterator[str]:
    port = free_port()
    server, thread = start_http_server(
        port, addr="127.0.0.1", registry=build_registry(LateTicks(), SelfStats())
    )
    config = {
        "global": {"scrape_interval": f"{SCRAPE_S * 1000:.0f}ms"},
        "scrape_configs": [
            {"job_name": "headroom", "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]},
        ],
    }
    try:
        with run_prometheus(config, tmp_path) as url:
            yield url
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def test_power_from_the_energy_counter_is_steady_when_ticks_drift(
    prometheus_on_late_ticks: str,
) -> None:
    url = prometheus_on_late_ticks

    def query(expr: str, **params: float) -> list:
        body = httpx.get(f"{url}/api/v1/query", params={"query": expr, **params}, timeout=30).json()
        assert body["status"] == "success", body
        return body["data"]["result"]

    # Six scrapes of the counter: five irates, each between two readings.
    samples = wait_until(
        lambda: (r := query("headroom_gpu_energy_joules_total[1m]")) and len(r[0]["values"]) >= 6
        and r[0]["values"],
        timeout=60,
        step=0.5,
    )  # fmt: skip
    watts = []
    for t, _ in samples[1:]:
        (point,) = query("irate(headroom_gpu_energy_joules_total[1m])", time=float(t))
        watts.append(float(point["value"][1]))
    assert watts == pytest.approx([WATTS] * len(watts), rel=0.01), watts
