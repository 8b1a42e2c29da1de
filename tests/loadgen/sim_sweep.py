"""A real `headroom sweep` of the simulated box over HTTP: its engine, /metrics and GPU page."""

from __future__ import annotations

from pathlib import Path

from headroom.cli import main
from simulator import start_sim


def sweep_sim(scenario: str, out: Path, *flags: str) -> int:
    """The scenario's box (its own load off), swept with flags reading its engine's and GPU's
    pages, then stopped; gives the sweep's exit status."""
    h = start_sim(scenario=scenario, port=0, load=False)
    try:
        return main(["sweep", "--target", h.url, "--vllm-metrics", h.metrics_url,
                     "--dcgm-exporter", h.gpu_metrics_url, *flags, "--out", str(out)])  # fmt: skip
    finally:
        h.stop()
