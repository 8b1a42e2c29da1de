"""Scenarios in real time through the subprocess API: what a monitor scraping the box would see.

Tolerances are wide: the machine has 2 shared cores and stalls at times.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from headroom.cli import main as headroom_main
from simulator import SCENARIOS, SimConfigError, start_sim


def scrape(url: str) -> dict[str, float]:
    out = {}
    for fam in text_string_to_metric_families(httpx.get(url, timeout=30).text):
        for s in fam.samples:
            if not s.labels.keys() - {"engine", "model_name", "gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION"}:  # fmt: skip
                out[s.name] = s.value
    return out


def engine_thread_cpu_seconds(pid: int) -> float:
    tick = os.sysconf("SC_CLK_TCK")
    for task in Path(f"/proc/{pid}/task").iterdir():
        if (task / "comm").read_text().strip() == "EngineCore":
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / tick
    raise AssertionError("no EngineCore thread")


def wait_for(pred, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.3)
    return False


def thread_share(pid: int, seconds: float) -> float:
    cpu0, t0 = engine_thread_cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)
    return (engine_thread_cpu_seconds(pid) - cpu0) / (time.monotonic() - t0)


def test_cpu_bound_box_idles_its_gpu_while_the_engine_thread_burns_cpu() -> None:
    with start_sim(scenario="idle") as sim:
        idle_share = thread_share(sim.pid, 2)
        sim.set_scenario("cpu-bound")
        assert wait_for(lambda: scrape(sim.metrics_url)["vllm:num_requests_running"] == 32)
        time.sleep(1.5)  # a full GPU sampling period of steady state
        busy_share = thread_share(sim.pid, 3)
        gpu = scrape(sim.gpu_metrics_url)
        engine = scrape(sim.metrics_url)
    assert idle_share < 0.03
    # 28 ms of host work per 40 ms step is ~70% of a core when the core is free; on this
    # shared 2-core machine the burn gets what the scheduler gives it (12% was seen at a
    # load average of 16), but it is real CPU on the engine thread.
    assert 0.05 < busy_share < 1.05
    # 12 ms of GPU per 40 ms step: ~30% busy, less when this machine starves the engine
    # thread and steps stretch, never more.
    assert 0 < gpu["DCGM_FI_DEV_GPU_UTIL"] <= 40
    assert engine["vllm:num_requests_waiting"] == 0


def test_switching_scenarios_changes_the_story_without_resetting_counters() -> None:
    with start_sim(scenario="idle") as sim:
        assert (
            sim.metrics_url == sim.url + "/metrics"
            and sim.gpu_metrics_url == sim.url + "/gpu/metrics"
        )
        idle = scrape(sim.metrics_url)
        assert idle["vllm:num_requests_running"] == 0
        assert scrape(sim.gpu_metrics_url)["DCGM_FI_DEV_GPU_UTIL"] == 0

        sim.set_scenario("seq-cap")
        assert sim.scenario == "seq-cap"
        assert wait_for(lambda: scrape(sim.metrics_url)["vllm:generation_tokens_total"] > 200)
        m = scrape(sim.metrics_url)
        assert m["vllm:num_requests_running"] == 8
        assert m["vllm:num_requests_waiting"] == 24
        assert m["vllm:kv_cache_usage_perc"] < 0.1

        tokens = m["vllm:generation_tokens_total"]
        sim.set_scenario("kv-cap")
        assert wait_for(lambda: scrape(sim.metrics_url)["vllm:num_preemptions_total"] >= 3)
        m = scrape(sim.metrics_url)
        assert m["vllm:generation_tokens_total"] >= tokens
        assert m["vllm:kv_cache_usage_perc"] > 0.8
        pid = sim.pid
    assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()


def test_start_sim_refuses_an_unknown_scenario() -> None:
    with pytest.raises(SimConfigError, match="unknown scenario"):
        start_sim(scenario="warp-speed")
    assert "starved" in SCENARIOS


def test_headroom_sim_reports_bad_input_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert headroom_main(["sim", "--scenario", "warp-speed"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown scenario 'warp-speed'" in err

    bad = tmp_path / "bad.toml"
    bad.write_text('scenario = "seq-cap"\n[engine]\nmax_num_seqz = 4\n')
    assert headroom_main(["sim", "--config", str(bad)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown key engine.max_num_seqz" in err

    assert headroom_main(["sim", "--listen", "nowhere"]) == 1
    assert "HOST:PORT" in capsys.readouterr().err
