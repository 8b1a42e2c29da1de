"""Helpers for the agent's tests: fake sources at the Source boundary, a restartable HTTP
endpoint serving real vLLM text, and an agent started on an ephemeral port."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from bench.fixture_server import DownableServer, send_page
from monitor.serve.agent import Agent
from monitor.serve.config import AgentConfig
from monitor.sources.base import Reading
from monitor.sources.samples import EngineSample, GpuSample, HostSample, SourceError
from monitor.window.stats import WindowStats

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
REPO = Path(__file__).resolve().parents[2]
# The NVML fake lives beside the NVML source's tests; it fakes pynvml, the library boundary.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "sources"))


class View:
    """What the exporter's collectors read: a fixed window and diagnosis (the Monitor's face)."""

    def __init__(self, window: WindowStats | None, diagnosis: Any) -> None:
        self._window, self._diagnosis = window, diagnosis

    def window(self) -> WindowStats | None:
        return self._window

    def diagnosis(self) -> Any:
        return self._diagnosis


class FakeGpuSource:
    """One GPU whose readings the test sets; ``fail`` makes the next reads report an error."""

    name = "nvml"

    def __init__(self, util: float | None = 0.5, sm_active: float | None = 0.4) -> None:
        self.util = util
        self.sm_active = sm_active
        self.fail: str | None = None
        self.block = threading.Event()  # set: read() hangs until cleared (a stuck driver)
        self.reads = 0

    def read(self) -> Reading:
        self.reads += 1
        while self.block.is_set():
            time.sleep(0.05)
        if self.fail:
            return Reading(errors=(SourceError("nvml", "gpu:0", self.fail),))
        return Reading(
            gpus=(
                GpuSample(
                    index=0,
                    uuid="GPU-0000",
                    name="NVIDIA H200",
                    source="nvml",
                    util=self.util,
                    sm_active=self.sm_active,
                    tensor_active=None,  # unsupported: must be absent from /metrics
                    power_watts=300.0,
                    memory_used_bytes=10 * 2**30,
                    memory_total_bytes=141 * 2**30,
                ),
            )
        )

    def close(self) -> None:
        pass


class FakeEngineSource:
    """A vLLM engine whose counters advance on every read."""

    name = "vllm"
    url = "http://127.0.0.1:1/metrics"

    def __init__(self, running: float = 4.0, waiting: float = 0.0) -> None:
        self.running = running
        self.waiting = waiting
        self.n = 0

    def read(self) -> Reading:
        self.n += 1
        return Reading(
            engines=(
                EngineSample(
                    url=self.url,
                    model_name="tiny",
                    engine="0",
                    running=self.running,
                    waiting=self.waiting,
                    kv_cache_usage=0.25,
                    generation_tokens_total=100.0 * self.n,
                    request_success_total=2.0 * self.n,
                ),
            ),
            host=HostSample(
                cpu_count=2, cpu_total_seconds=10.0 * self.n, cpu_idle_seconds=5.0 * self.n
            ),
        )

    def close(self) -> None:
        pass


class Endpoint(DownableServer):
    """A /metrics endpoint on 127.0.0.1 that can go down, turn slow, and come back on its port."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.delay = 0.0
        self.hits = 0
        super().__init__(self._answer)

    def _answer(self, handler: BaseHTTPRequestHandler) -> None:
        self.hits += 1
        if self.delay:
            time.sleep(self.delay)
        send_page(handler, self.body, "text/plain; version=0.0.4")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/metrics"

    def restart(self) -> None:
        self.start()


def wait_until(predicate: Callable[[], Any], timeout: float = 20.0, step: float = 0.1) -> Any:
    """Poll until ``predicate`` returns something truthy; generous for a machine that stalls."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(step)


def hostport(url: str) -> str:
    """A URL's host:port, as a Prometheus scrape target names it."""
    parts = urlsplit(url)
    return f"{parts.hostname}:{parts.port}"


def sim_agent(sim: Any, **overrides: Any) -> Agent:
    """An agent watching a simulator (its engine page and its dcgm-exporter page, no NVML),
    started; ``overrides`` are AgentConfig's."""
    values: dict[str, Any] = dict(
        listen="127.0.0.1:0",
        vllm=(sim.url,),
        dcgm_exporter=sim.gpu_metrics_url,
        nvml=False,
        interval=0.5,
        window=4.0,
        pids=(sim.pid,),
    )
    values.update(overrides)
    agent = Agent(AgentConfig(**values))
    agent.start()
    return agent


def make_config(**overrides: Any) -> AgentConfig:
    values: dict[str, Any] = dict(listen="127.0.0.1:0", interval=0.2, window=1.0, nvml=False)
    values.update(overrides)
    return AgentConfig(**values)


@pytest.fixture
def start_agent() -> Iterator[Callable[..., Agent]]:
    started: list[Agent] = []

    def start(sources: list[Any], **overrides: Any) -> Agent:
        agent = Agent(make_config(**overrides), sources=sources)
        agent.start()
        started.append(agent)
        return agent

    yield start
    for agent in started:
        agent.stop()


def get(url: str, **kwargs: Any) -> httpx.Response:
    return httpx.get(url, timeout=kwargs.pop("timeout", 10.0), **kwargs)
