"""A real `headroom sweep` of the simulated box over HTTP: its engine, /metrics and GPU page."""

from __future__ import annotations

import contextlib
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from headroom.cli import main
from loadgen.tune import free_port
from simulator import start_sim


def sweep_sim(scenario: str, out: Path, *flags: str, otlp_port: int | None = None) -> int:
    """The scenario's box (its own load off), swept with flags reading its engine's and GPU's
    pages, then stopped; gives the sweep's exit status. With ``otlp_port`` the box sends each
    request's span there, as vLLM can, and the sweep listens for them."""
    otlp = None if otlp_port is None else f"http://127.0.0.1:{otlp_port}/v1/traces"
    h = start_sim(scenario=scenario, port=0, load=False, otlp_traces_endpoint=otlp)
    listen = [] if otlp_port is None else ["--otlp-listen", str(otlp_port)]
    try:
        return main(["sweep", "--target", h.url, "--vllm-metrics", h.metrics_url,
                     "--dcgm-exporter", h.gpu_metrics_url, *flags, *listen,
                     "--out", str(out)])  # fmt: skip
    finally:
        h.stop()


@dataclass(frozen=True)
class SeqCapSweep:
    """The seq-cap box's sweep, as its tests read it."""

    out: Path
    doc: dict[str, Any]
    console: str  # what the sweep printed, stdout then stderr


# What test_sweep_sim reads (saturation at the cap of 8, TTFT taken apart by the spans),
# test_sweep_energy reads (energy per token down to the cap) and
# test_sweep_capacity reads (boxes for a target at a TTFT SLO, energy at saturation) of one
# sweep: a sweep of the simulator holds the suite for half a minute.
SEQ_CAP_FLAGS = (
    "--concurrency", "2,4,8,16", "--step-seconds", "4", "--warmup-seconds", "1.5",
    "--sample-interval", "0.5", "--input-tokens", "128", "--output-tokens", "32",
    "--slo", "ttft_p95=1", "--target-rate", "100", "--margin", "0.25",
    "--gpu-hour-price", "3.6",
)  # fmt: skip


def seq_cap_sweep(out: Path) -> SeqCapSweep:
    """The simulator's seq-cap box (max_num_seqs 8) swept once, its console kept."""
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        rc = sweep_sim("seq-cap", out, *SEQ_CAP_FLAGS, otlp_port=free_port())
    assert rc == 0, stderr.getvalue()[-3000:]
    doc = json.loads((out / "sweep.json").read_text())
    return SeqCapSweep(out, doc, stdout.getvalue() + stderr.getvalue())
