"""Energy and cost per token over a window of replayed readings: counters with resets, GPUs
without a counter, MIG instances, the price, and the idle part of the bill in verdicts."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from monitor.core.errors import ConfigError
from monitor.diagnosis import diagnose
from monitor.diagnosis.energy import parse_price, price_from, window_energy
from monitor.sources.samples import EngineSample, GpuSample, Snapshot
from monitor.watch.report import build_report, render_text
from monitor.window.full import compute_window
from monitor.window.live import LiveWindow

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "diagnosis"))
from virtual_box import closed_loop  # noqa: E402

from simulator.scenarios import build  # noqa: E402

URL = "http://127.0.0.1:8000"


def gpu(i: int, energy: float | None, power: float | None = 400.0, **kw: object) -> GpuSample:
    return GpuSample(
        index=i,
        uuid=f"GPU-{i}",
        name="NVIDIA H200",
        source="nvml",
        util=0.9,
        power_watts=power,
        energy_joules=energy,
        energy_source="counter" if energy is not None else None,
        **kw,  # type: ignore[arg-type]
    )


def engine(t: float, tok_per_s: float = 2000.0, req_per_s: float = 10.0) -> EngineSample:
    return EngineSample(
        url=URL,
        model_name="m",
        engine="0",
        running=20.0,
        waiting=0.0,
        generation_tokens_total=tok_per_s * t,
        request_success_total=req_per_s * t,
    )


def readings(n: int = 11, reset_at: int | None = None) -> list[Snapshot]:
    """Two GPUs at 400 W for n-1 seconds while the engine makes 2,000 tokens/s."""
    snaps = []
    base = [7_000_000.0, 5_000.0]
    for i in range(n):
        if reset_at is not None and i == reset_at:
            base[0] = -400.0 * (i - 1)  # the driver reloaded between ticks i-1 and i
        gpus = tuple(gpu(k, base[k] + 400.0 * i) for k in range(2))
        snaps.append(Snapshot(t=float(i), wall=1e9 + i, gpus=gpus, engines=(engine(float(i)),)))
    return snaps


def test_joules_per_token_request_and_cost_over_replayed_readings() -> None:
    w = compute_window(readings())
    en = window_energy(w, price_per_gpu_hour=3.6)
    assert en.joules == pytest.approx(8000.0)  # 2 GPUs x 400 W x 10 s
    assert en.power_watts == pytest.approx(800.0)
    assert en.tokens == pytest.approx(20_000.0) and en.requests == pytest.approx(100.0)
    assert en.joules_per_token == pytest.approx(0.4)
    assert en.joules_per_request == pytest.approx(80.0)
    assert en.tokens_per_joule == pytest.approx(2.5)
    # $3.60 per GPU-hour, 2 GPUs, 10 s: 2 cents for 20,000 tokens, $1 per million.
    assert en.cost_per_million_tokens == pytest.approx(1.0)
    assert en.source == "counter" and en.missing == ()


def test_a_counter_reset_in_the_window_still_counts_the_energy() -> None:
    en = window_energy(compute_window(readings(reset_at=5)))
    assert en.joules == pytest.approx(8000.0)


def test_live_window_gives_the_same_energy() -> None:
    live = LiveWindow(100.0)
    for s in readings(reset_at=4):
        live.push(s)
    assert window_energy(live.stats()).joules == pytest.approx(8000.0)


def test_no_counter_means_power_times_time_marked_power() -> None:
    snaps = [
        Snapshot(t=float(i), wall=float(i), gpus=(gpu(0, None, 250.0),), engines=(engine(i),))
        for i in range(11)
    ]
    en = window_energy(compute_window(snaps))
    assert en.joules == pytest.approx(2500.0) and en.source == "power"


def test_a_mig_instance_alone_is_a_dash_and_a_note_not_zero() -> None:
    snaps = [
        Snapshot(
            t=float(i),
            wall=float(i),
            gpus=(gpu(1, None, None, mig_parent=0, mig_instance=1),),
            engines=(engine(i),),
        )
        for i in range(11)
    ]
    w = compute_window(snaps)
    en = window_energy(w)
    assert en.joules is None and en.joules_per_token is None and en.missing == ("gpu:0/mig:1",)
    report = build_report(w)
    assert report["engines"][0]["energy_per_token_joules"] is None
    assert any("no energy or power reading for gpu:0/mig:1" in n for n in report["notes"])
    assert "energy: - (no energy or power reading for gpu:0/mig:1)" in render_text(report)


def test_mig_instances_beside_their_gpu_count_the_board_once() -> None:
    snaps = [
        Snapshot(
            t=float(i),
            wall=float(i),
            gpus=(gpu(0, 400.0 * i), gpu(1, None, None, mig_parent=0, mig_instance=1)),
            engines=(engine(i),),
        )
        for i in range(11)
    ]
    en = window_energy(compute_window(snaps))
    assert en.gpus == 1 and en.joules == pytest.approx(4000.0)


def test_report_json_and_text_carry_the_energy() -> None:
    w = compute_window(readings())
    report = build_report(w, gpu_hour_price=3.6)
    e = report["engines"][0]
    assert e["energy_per_token_joules"] == pytest.approx(0.4)
    assert e["energy_per_request_joules"] == pytest.approx(80.0)
    assert e["tokens_per_joule"] == pytest.approx(2.5)
    assert e["cost_per_million_tokens"] == pytest.approx(1.0)
    assert report["gpus"][0]["energy_joules"] == pytest.approx(4000.0)
    assert report["gpus"][0]["energy_source"] == "counter"
    assert report["energy"]["power_watts"] == pytest.approx(800.0)
    text = render_text(report)
    assert "energy: 800 W (8.0 kJ over 10.0 s, counter); 0.4 J/token, 2.5 tokens/J" in text
    assert "$1.00 per million tokens at $3.60/GPU-hour" in text


def test_idle_box_verdict_says_the_idle_bill_in_energy_and_money() -> None:
    snaps = [
        Snapshot(
            t=float(i),
            wall=float(i),
            gpus=tuple(
                GpuSample(k, f"GPU-{k}", "H200", "nvml", util=0.0, power_watts=75.0)
                for k in range(2)
            ),
            engines=(
                EngineSample(URL, "m", "0", running=0.0, waiting=0.0, request_success_total=5.0),
            ),
        )
        for i in range(11)
    ]
    w = compute_window(snaps)
    (idle,) = [v for v in diagnose(w).verdicts if v.cause == "idle"]
    assert "The GPUs draw 150 W held idle (0.54 MJ an hour)" in idle.summary
    (idle,) = [v for v in diagnose(w, gpu_hour_price=2.5).verdicts if v.cause == "idle"]
    assert "$5.00 an hour at $2.50/GPU-hour" in idle.summary
    assert any(e.name == "idle_cost_per_hour" and e.value == 5.0 for e in idle.evidence)


def test_an_idle_mig_instance_alone_is_billed_in_money_without_watts() -> None:
    snaps = [
        Snapshot(
            t=float(i),
            wall=float(i),
            gpus=(
                GpuSample(1, "MIG-1", "H200 MIG", "nvml", util=0.0, mig_parent=0, mig_instance=1),
            ),  # fmt: skip
            engines=(EngineSample(URL, "m", "0", running=0.0, waiting=0.0),),
        )
        for i in range(11)
    ]
    (idle,) = [v for v in diagnose(compute_window(snaps), gpu_hour_price=2.5).verdicts]
    assert idle.summary.endswith("The GPUs held idle cost $2.50 an hour at $2.50/GPU-hour."), (
        idle.summary
    )
    (idle,) = [v for v in diagnose(compute_window(snaps)).verdicts]
    assert "held idle" not in idle.summary  # no watts, no price: nothing to say, not 0 W


def test_bad_prices_are_one_line() -> None:
    assert parse_price("2.5") == 2.5 and parse_price(None) is None
    for bad in ("-1", "abc", "nan", "inf"):
        with pytest.raises(ConfigError, match="--gpu-hour-price"):
            parse_price(bad)
    assert price_from(None, {"HEADROOM_GPU_HOUR_PRICE": "4"}) == 4.0
    assert price_from("1", {"HEADROOM_GPU_HOUR_PRICE": "4"}) == 1.0
    with pytest.raises(ConfigError, match="HEADROOM_GPU_HOUR_PRICE"):
        price_from(None, {"HEADROOM_GPU_HOUR_PRICE": "-3"})


def test_simulated_box_energy_per_token_falls_as_batching_amortises_the_idle_watts() -> None:
    # The memory-bound box read through headroom's own parsers on its virtual clock: more
    # streams share each step's weight reads, so each token costs less energy.
    box = build("memory-bound")
    per_token = {}
    for n in (1, 8, 64):
        w = closed_loop(box, n, warmup_s=30, window_s=20)
        en = window_energy(w)
        assert en.source == "counter"
        # The counter agrees with the power the page served, tick by tick.
        assert en.power_watts == pytest.approx(w.gpus[0].power_watts, rel=0.02)
        per_token[n] = en.joules_per_token
    # The board draws only a little more at 64 streams than at 1 (410-470 W) while making
    # ~50 times the tokens: a token's energy falls about as fast as throughput rises.
    assert per_token[1] > 5 * per_token[8] > 5 * 5 * per_token[64] / 2


def test_a_window_of_one_reading_has_no_energy_and_no_false_note() -> None:
    w = compute_window(readings(n=1))
    en = window_energy(w)
    assert en.joules is None and en.missing == ()
    report = build_report(w)
    assert not any("energy" in n for n in report["notes"])
    assert "energy: - (the window holds fewer than two readings)" in render_text(report)
