"""The collectors: names and labels, absent-not-zero, the diagnosis as 0/1, self-metrics."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from agent_support import View
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from monitor.diagnosis import CAUSES, Diagnosis, Evidence, Verdict
from monitor.serve.exporter import SelfStats, build_registry
from monitor.sources.samples import EngineSample, GpuSample, Snapshot, SourceError
from monitor.window.full import compute_window
from monitor.window.scopes import engine_scope
from monitor.window.stats import WindowStats

URL = "http://127.0.0.1:8000/metrics"


def scrape(
    view: View, stats: SelfStats | None = None
) -> dict[str, list[tuple[dict[str, str], float]]]:
    text = generate_latest(build_registry(view, stats or SelfStats(), "1.2.3", 1.0, 10.0)).decode()
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def five_ticks(
    gpus: Callable[[int], tuple[GpuSample, ...]], engines: Callable[[int], tuple[EngineSample, ...]]
) -> WindowStats:
    """The window over five ticks a second apart, each tick's GPUs and engines made for it."""
    snaps = [
        Snapshot(t=float(i), wall=1000.0 + i, gpus=gpus(i), engines=engines(i)) for i in range(5)
    ]
    return compute_window(snaps)


def h200(index: int, uuid: str, **figures: Any) -> GpuSample:
    return GpuSample(index, uuid, "NVIDIA H200", "nvml", **figures)


def window() -> WindowStats:
    return five_ticks(
        lambda i: (
            h200(0, "GPU-a", util=0.27, sm_active=0.0004, power_watts=None,
                 throttle_reasons=("sw_power_cap",)),
            h200(1, "GPU-b", util=0.0, sm_active=0.0, tensor_active=0.0),
        ),
        lambda i: (
            EngineSample(URL, "m", "0", running=64, waiting=8, kv_cache_usage=0.4,
                         request_success_total=3.0 * i),
        ),
    )  # fmt: skip


def test_gpu_series_and_absent_values() -> None:
    m = scrape(View(window(), None))
    util = {lab["gpu"]: v for lab, v in m["headroom_gpu_utilization_ratio"]}
    assert util == {"0": pytest.approx(0.27), "1": 0.0}  # a real 0 is exported
    # Tensor activity read on GPU 1 only: GPU 0's series is absent, not 0.
    assert [lab["gpu"] for lab, _ in m["headroom_gpu_tensor_active_ratio"]] == ["1"]
    assert "headroom_gpu_power_watts" not in m
    ((labels, _),) = m["headroom_gpu_clock_throttle_active"]
    assert labels["reason"] == "sw_power_cap" and labels["uuid"] == "GPU-a"
    ((labels, rps),) = m["headroom_engine_requests_per_second"]
    assert labels == {"url": URL, "model_name": "m", "engine": "0"}
    assert rps == pytest.approx(3.0)
    # Before the first tick nothing but self-metrics is exported.
    empty = scrape(View(None, None))
    assert not any(
        k.startswith(("headroom_gpu", "headroom_engine", "headroom_diagnosis")) for k in empty
    )
    assert empty["headroom_agent_build_info"][0][0] == {"version": "1.2.3"}


def test_energy_counter_per_gpu_and_energy_per_token_per_engine() -> None:
    stats = five_ticks(
        lambda i: (
            h200(0, "GPU-a", util=0.9, power_watts=500.0, energy_joules=1000.0 + 500.0 * i,
                 energy_source="counter"),
            GpuSample(1, "GPU-b", "NVIDIA T4", "nvml", util=0.9, power_watts=50.0,
                      energy_joules=50.0 * i, energy_source="power"),
            GpuSample(2, "MIG-c", "NVIDIA H200 MIG", "nvml", util=0.9, mig_parent=0,
                      mig_instance=1),
        ),
        lambda i: (
            EngineSample(URL, "m", "0", running=8.0, waiting=0.0,
                         generation_tokens_total=1100.0 * i, request_success_total=5.5 * i),
        ),
    )  # fmt: skip
    view = View(stats, None)
    view.gpu_hour_price = 3.6  # type: ignore[attr-defined]
    m = scrape(view)
    energy = {
        lab["gpu"]: (lab["energy_from"], v) for lab, v in m["headroom_gpu_energy_joules_total"]
    }
    # The counter's value as read; the MIG instance has none: absent, not 0.
    assert energy == {"0": ("counter", 3000.0), "1": ("power", 200.0)}
    ((labels, jt),) = m["headroom_engine_energy_per_token_joules"]
    assert labels == {"url": URL, "model_name": "m", "engine": "0"}
    assert jt == pytest.approx(550.0 / 1100.0)  # both boards' watts over the engine's tokens
    assert m["headroom_engine_energy_per_request_joules"][0][1] == pytest.approx(100.0)
    assert m["headroom_engine_tokens_per_joule"][0][1] == pytest.approx(2.0)
    # $3.60 a GPU-hour x 2 boards over 1,100 tokens a second.
    assert m["headroom_engine_cost_per_million_tokens"][0][1] == pytest.approx(
        2 * 1e-3 / 1100 * 1e6
    )
    # Without GPU energy or a price, the engine's energy series are absent, not 0.
    bare = scrape(View(window(), None))
    assert not [k for k in bare if "energy" in k or "joule" in k or "cost" in k]


def test_diagnosis_gauges_and_analysis_units() -> None:
    w = window()
    scope = engine_scope(w.engines[0])
    verdict = Verdict(
        "seq-cap", 0.8, scope,
        (Evidence("waiting_mean", 8.0, 0.5, ">"), Evidence("seq_cap", 64.0)),
        "raise --max-num-seqs", "Sequence cap.",
    )  # fmt: skip
    analyses = {
        scope: {"seq_cap": 64, "seq_cap_inferred": True, "seq_cap_assumed": False,
                "gpu_ms_per_step": 12.0, "queue_sustained": True, "littles_ok": None,
                "roofline": {"mfu": 0.31, "side": "memory", "gpu": "H200"}},
    }  # fmt: skip
    m = scrape(View(w, Diagnosis((verdict,), analyses)))
    states = {(lab["cause"], lab["scope"]): v for lab, v in m["headroom_diagnosis"]}
    assert states[("seq-cap", scope)] == 1.0
    # Every cause of every watched scope is there, 0 unless current.
    for s in ("box", "gpu:0", "gpu:1", scope):
        assert {c for c, sc in states if sc == s} == set(CAUSES)
    assert sum(states.values()) == 1.0
    assert m["headroom_diagnosis_confidence"] == [({"cause": "seq-cap", "scope": scope}, 0.8)]
    ev = {lab["name"]: v for lab, v in m["headroom_diagnosis_evidence"]}
    assert ev == {"waiting_mean": 8.0, "seq_cap": 64.0}
    th = {lab["name"]: v for lab, v in m["headroom_diagnosis_evidence_threshold"]}
    assert th == {"waiting_mean": 0.5}
    ((labels, cap),) = m["headroom_engine_seq_cap"]
    assert labels["origin"] == "inferred" and cap == 64
    assert m["headroom_engine_gpu_seconds_per_step"][0][1] == pytest.approx(0.012)
    assert m["headroom_engine_queue_sustained"][0][1] == 1.0
    assert "headroom_engine_littles_law_consistent" not in m  # None: not known, not 0
    assert m["headroom_engine_roofline_mfu_ratio"][0][1] == pytest.approx(0.31)
    ((labels, _),) = m["headroom_engine_roofline_side"]
    assert (labels["side"], labels["gpu_model"]) == ("memory", "H200")


def test_self_metrics_count_ticks_errors_and_successes() -> None:
    stats = SelfStats(wall=lambda: 5000.0)
    for d in (0.003, 0.04, 0.04, 3.0):
        stats.on_snapshot(
            Snapshot(t=0.0, wall=4000.0, duration_s=d,
                     errors=(SourceError("vllm", URL, "connection refused"),) if d > 1 else ())
        )  # fmt: skip
    stats.source_succeeded("nvml")
    m = scrape(View(None, None), stats)
    buckets = {lab["le"]: v for lab, v in m["headroom_agent_tick_duration_seconds_bucket"]}
    assert (
        buckets["0.005"] == 1
        and buckets["0.05"] == 3
        and buckets["2.5"] == 3
        and buckets["+Inf"] == 4
    )
    assert m["headroom_agent_tick_duration_seconds_sum"][0][1] == pytest.approx(3.083)
    assert m["headroom_agent_ticks_total"][0][1] == 4
    assert m["headroom_agent_source_errors_total"] == [({"source": "vllm", "target": URL}, 1.0)]
    assert m["headroom_agent_source_last_success_timestamp_seconds"] == [
        ({"source": "nvml", "target": ""}, 5000.0)
    ]
    assert m["headroom_agent_last_tick_timestamp_seconds"][0][1] == 4000.0


def test_an_engine_page_without_a_kv_gauge_is_said_missing_not_zero() -> None:
    from pathlib import Path

    from monitor.sources.vllm import engines_from_text

    page = (
        Path(__file__).resolve().parents[1] / "fixtures" / "engines" / "tgi-2.4.txt"
    ).read_text()
    engines, _ = engines_from_text(page, URL)
    snaps = [Snapshot(t=float(i), wall=1000.0 + i, engines=engines) for i in range(3)]
    m = scrape(View(compute_window(snaps), None))
    ((labels, value),) = m["headroom_engine_info"]
    assert (labels["flavour"], labels["flavour_version"], value) == ("tgi", "1.0-3.x", 1.0)
    missing = {lab["field"]: v for lab, v in m["headroom_engine_metric_missing"]}
    assert missing["kv_cache_usage"] == 1.0 and missing["ttft"] == 1.0
    assert {lab["flavour"] for lab, _ in m["headroom_engine_metric_missing"]} == {"tgi"}
    assert "running" not in missing
    # The KV series is absent, not 0; the queue TGI does export is there.
    assert "headroom_engine_kv_cache_usage_ratio" not in m
    assert m["headroom_engine_requests_waiting"][0][1] == 7.0


def test_the_energy_counter_carries_the_time_its_reading_was_taken() -> None:
    # Prometheus then rates the counter over the time between two readings, not between two
    # scrapes: a tick that ran late no longer reads as a burst of power. A GPU its source
    # read last three ticks ago carries that tick's time, not the window's end.
    stats = five_ticks(
        lambda i: (
            h200(0, "GPU-a", energy_joules=300.0 * i, energy_source="counter"),
            *((h200(1, "GPU-b", energy_joules=50.0 * i),) if i <= 1 else ()),
        ),
        lambda i: (),
    )
    text = generate_latest(build_registry(View(stats, None), SelfStats())).decode()
    stamps = {
        s.labels["gpu"]: (s.value, s.timestamp)
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if s.name == "headroom_gpu_energy_joules_total"
    }
    assert stamps == {"0": (1200.0, 1004.0), "1": (50.0, 1001.0)}
    # The gauges are the window's figures as of the scrape: no timestamp, so Prometheus
    # marks them stale when the agent goes.
    stamped = {
        s.name
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if s.timestamp is not None
    }
    assert stamped == {"headroom_gpu_energy_joules_total"}


def test_a_reading_made_later_is_stamped_with_the_time_the_source_read() -> None:
    # The agent parses an engine page a few ticks after fetching it: the source's last
    # success is when it answered, not when its page was parsed.

    from monitor.serve.agent import TrackedSource
    from monitor.sources.base import Reading

    now = [1_000.0]

    class Page:
        name = "vllm"
        url = "http://127.0.0.1:1/metrics"
        fail = False

        def read(self) -> Reading:
            return self.read_later()()

        def read_later(self) -> Callable[[], Reading]:
            fail = self.fail
            if fail:
                return lambda: Reading(errors=(SourceError("vllm", self.url, "refused"),))
            return lambda: Reading(
                engines=(EngineSample(url=self.url, model_name="m", engine="0"),)
            )

        def close(self) -> None:
            pass

    stats = SelfStats(wall=lambda: now[0])
    page = Page()
    tracked = TrackedSource(page, stats)
    made = tracked.read_later()
    now[0] += 1.0
    page.fail = True
    failed = tracked.read_later()
    now[0] += 4.0
    assert made().engines and failed().errors
    key = ("vllm", "http://127.0.0.1:1/metrics")
    assert stats.source_ages([key]) == {key: 5.0}


@pytest.mark.parametrize("stall_s", [0.0, 3.0])
def test_a_paced_engines_rates_stay_exported_between_its_reads(stall_s: float) -> None:
    # The agent reads an engine page once a second at faster ticks (monitor.sources.paced):
    # most snapshots, the window's baseline one among them, hold none of its readings. A
    # window of a second must still give every scrape its rate, or the series comes and goes
    # (gaps in Prometheus, absent() alerts firing). Replayed on a virtual clock: 200 ms ticks
    # a little late now and then, and once (stall_s) the whole machine frozen.
    import random

    from agent_support import FakeEngineSource, FakeGpuSource

    from monitor.read.sampler import Sampler
    from monitor.sources.paced import Paced
    from monitor.watch.pipeline import Monitor

    now = [1_000.0]
    engine = FakeEngineSource()  # 2 requests a read
    paced = Paced(engine, 1.0, slack_s=0.1, clock=lambda: now[0])
    sampler = Sampler(
        [FakeGpuSource(), paced], interval=0.2, capacity=13, clock=lambda: now[0],
        wall=lambda: now[0] + 1.7e9, inline=("nvml", "vllm"),
    )  # fmt: skip
    monitor = Monitor(sampler, window_s=1.0)
    rng = random.Random(5)
    rates = []
    for i in range(60):
        now[0] += 0.2 + (rng.uniform(0.0, 0.08) if rng.random() < 0.3 else 0.0)
        if i == 30:
            now[0] += stall_s
        sampler.tick()
        m = scrape(monitor)
        if engine.n >= 2:
            rates.append([v for _, v in m.get("headroom_engine_requests_per_second", [])])
    sampler.close()
    assert len(rates) > 40
    assert all(len(r) == 1 for r in rates), [len(r) for r in rates]
    # Two requests a read, a read a second: 2/s; across the stall, less, never absent.
    assert all(0.4 < r[0] < 2.5 for r in rates), rates
