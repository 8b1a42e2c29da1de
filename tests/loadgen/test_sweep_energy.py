"""The energy curve of a real sweep of the simulator (its seq-cap box, max_num_seqs 8; the
sweep the saturation and capacity tests read too): each step's GPU power from the simulated
board's energy counter, energy per token falling as batching spreads the watts until the cap
stops the batch growing, the cost per million tokens at a price, in every output (console,
CSV, JSON, report, plot)."""

from __future__ import annotations

import csv

import pytest
from sim_sweep import SeqCapSweep


def test_energy_per_token_falls_with_the_batch_until_the_cap(
    seq_cap_sim_sweep: SeqCapSweep,
) -> None:
    out = seq_cap_sim_sweep.out
    steps = {s["concurrency"]: s for s in seq_cap_sim_sweep.doc["steps"]}
    assert set(steps) == {2, 4, 8, 16}
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
    # Up to the cap each doubling shares a step's weight reads among twice the sequences:
    # the joules a token nearly halve (1.36, 0.69, 0.36 J at 2, 4, 8 streams, one run).
    jt = {c: steps[c]["energy_per_token_joules"] for c in steps}
    assert jt[2] > 1.6 * jt[4] > 1.6 * 1.6 * jt[8], jt
    # Past it the engine runs the same 8 at once and the rest wait: no cheaper tokens.
    assert jt[16] == pytest.approx(jt[8], rel=0.25), jt
    with open(out / "steps.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert {"gpu_power_watts", "energy_per_token_joules", "cost_per_million_tokens"} <= set(rows[0])
    assert all(float(r["energy_per_token_joules"]) > 0 for r in rows)
    html = (out / "report.html").read_text()
    assert "J/token" in html and "cost per M tokens" in html and "energy" in html
    assert (out / "energy.png").stat().st_size > 10_000
    assert " J/token, " in seq_cap_sim_sweep.console and "/Mtok" in seq_cap_sim_sweep.console
