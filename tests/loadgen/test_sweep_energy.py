"""A short real sweep against the simulator shows the energy curve: each step's GPU power from
the simulated board's energy counter, energy per token falling as batching spreads the watts,
the cost per million tokens at a price, in every output (console, CSV, JSON, report, plot)."""

from __future__ import annotations

import csv
import json

import pytest
from sim_sweep import sweep_sim

SHORT = ["--step-seconds", "4", "--warmup-seconds", "1.5", "--sample-interval", "0.5"]


def test_energy_per_token_falls_with_load_in_every_output(tmp_path, capsys) -> None:
    out = tmp_path / "e"
    rc = sweep_sim("memory-bound", out, *SHORT, "--concurrency", "1,4,16", "--input-tokens",
                   "128", "--output-tokens", "64", "--gpu-hour-price", "3.6")  # fmt: skip
    assert rc == 0
    console = capsys.readouterr()
    steps = {s["concurrency"]: s for s in json.loads((out / "sweep.json").read_text())["steps"]}
    assert set(steps) == {1, 4, 16}
    for c, s in steps.items():
        assert s["energy_source"] == "counter", c
        # The simulated H100 draws between its idle 70 W and its 700 W TDP.
        assert 70 <= s["gpu_power_watts"] <= 700, c
        assert s["energy_per_token_joules"] == pytest.approx(
            s["gpu_power_watts"] / s["output_tokens_per_s"], rel=1e-3
        )
        assert s["energy_per_request_joules"] == pytest.approx(
            s["gpu_power_watts"] / s["requests_per_s"], rel=1e-3
        )
        # $3.60 a GPU-hour is a tenth of a cent a second: a million tokens' worth of seconds.
        assert s["cost_per_million_tokens"] == pytest.approx(
            1e-3 / s["output_tokens_per_s"] * 1e6, rel=1e-3
        )
    # The energy curve: four and sixteen streams share each step's weight reads.
    jt = [steps[c]["energy_per_token_joules"] for c in (1, 4, 16)]
    assert jt[0] > 2 * jt[1] > 2 * 2 * jt[2], jt
    with open(out / "steps.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert {"gpu_power_watts", "energy_per_token_joules", "cost_per_million_tokens"} <= set(rows[0])
    assert all(float(r["energy_per_token_joules"]) > 0 for r in rows)
    html = (out / "report.html").read_text()
    assert "J/token" in html and "cost per M tokens" in html and "energy" in html
    assert (out / "energy.png").stat().st_size > 10_000
    text = console.out + console.err
    assert " J/token, " in text and "/Mtok" in text
