"""A simulated LLM serving box: a vLLM-like engine on a simulated GPU, with its own load.

Serves an OpenAI-compatible API, vLLM's ``/metrics`` and dcgm-exporter's
``/gpu/metrics``. It imports nothing from ``monitor``, ``loadgen`` or ``headroom``.

    from simulator import start_sim, SCENARIOS
    with start_sim(scenario="starved") as sim:
        ...  # sim.url, sim.metrics_url, sim.gpu_metrics_url, sim.pid

``Simulator`` runs the same engine in-process on a virtual clock, for tests.
"""

from __future__ import annotations

from simulator.box import Simulator
from simulator.config import EngineConfig, LoadConfig, SimConfig
from simulator.errors import SimConfigError, SimError, SimStartError
from simulator.process import SimHandle, start_sim
from simulator.scenarios import SCENARIOS, Scenario, build

__all__ = [
    "SCENARIOS",
    "EngineConfig",
    "LoadConfig",
    "Scenario",
    "SimConfig",
    "SimConfigError",
    "SimError",
    "SimHandle",
    "SimStartError",
    "Simulator",
    "build",
    "start_sim",
]
