"""Prometheus rules: promtool check and test pass, every alert has a firing and a quiet test,
and the alerts name the same causes as the Python diagnosis on the same scenario series."""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from agent_support import REPO, View
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from monitor.diagnosis import Caps, diagnose
from monitor.serve.exporter import view_collectors
from monitor.sources.samples import (
    EngineSample,
    GpuProcess,
    GpuSample,
    HostSample,
    ProcessCpu,
    Snapshot,
    ThreadCpu,
)
from monitor.window.full import compute_window

PROM = REPO / "configs" / "prometheus"
RULE_FILES = sorted((PROM / "rules").glob("*.yml"))
TEST_FILES = sorted((PROM / "tests").glob("*_test.yml"))
# The causes the alerts stand for.
ALERT_FOR_CAUSE = {
    "starved": "GPUStarved",
    "seq-cap": "SchedulerSeqCap",
    "kv-cap": "KVCachePressure",
    "cpu-bound": "CPUInPath",
    "launch-bound": "LaunchBound",
    "small-kernels": "SmallKernels",
    "transfer-bound": "TransferBound",
    "contended": "GpuContended",
}

pytestmark = pytest.mark.skipif(
    shutil.which("promtool") is None, reason="needs promtool (Debian package prometheus)"
)


def promtool(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["promtool", *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_promtool_check_rules() -> None:
    assert RULE_FILES
    r = promtool("check", "rules", *map(str, RULE_FILES))
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("SUCCESS") == len(RULE_FILES)


@pytest.mark.parametrize("test_file", TEST_FILES, ids=lambda p: p.name)
def test_promtool_test_rules(test_file: Path) -> None:
    r = promtool("test", "rules", test_file.name, cwd=test_file.parent)
    assert r.returncode == 0, r.stdout + r.stderr


def test_every_alert_has_a_firing_and_a_quiet_test() -> None:
    alerts = {
        rule["alert"]
        for f in RULE_FILES
        for group in yaml.safe_load(f.read_text())["groups"]
        for rule in group["rules"]
        if "alert" in rule
    }
    assert set(ALERT_FOR_CAUSE.values()) | {"HeadroomAgentDown"} <= alerts
    firing: set[str] = set()
    quiet: set[str] = set()
    for f in TEST_FILES:
        for test in yaml.safe_load(f.read_text())["tests"]:
            for case in test.get("alert_rule_test", []):
                (firing if case.get("exp_alerts") else quiet).add(case["alertname"])
    assert firing == alerts and quiet == alerts
    # Each summary says the fix, not only the symptom.
    for f in RULE_FILES:
        for group in yaml.safe_load(f.read_text())["groups"]:
            for rule in group["rules"]:
                if "alert" in rule:
                    summary = rule["annotations"]["summary"]
                    fix = summary.split(":", 1)[1]
                    assert re.search(r"\b(send|raise|use|overlap|check)\b", fix), summary


# --- the rules and the Python diagnosis agree ----------------------------------------------

URL = "http://127.0.0.1:8000/metrics"


@dataclass
class Scenario:
    name: str
    util: float | None = None
    sm_active: float | None = None
    tensor: float | None = None
    running: float | None = None
    waiting: float = 0.0
    kv: float = 0.3
    rps: float = 1.0
    preempt_per_s: float = 0.0
    thread_cpu: float | None = None
    caps: Caps = Caps()
    dram: float | None = None
    pcie_rx: float | None = None  # with a Gen5 x16 link
    # (pid, SM share) of the GPU's processes; pid 100 is the engine's (with thread_cpu).
    procs: tuple[tuple[int, float], ...] | None = None


SCENARIOS = [
    # Story A: 64 slots, ~10 in flight, GPU mostly idle.
    Scenario("starved", util=0.25, sm_active=0.12, running=10, rps=1.0, caps=Caps(max_num_seqs=64)),
    # Story C: requests wait while R sits at the cap and the GPU has room (cap inferred).
    Scenario("seq-cap", util=0.6, sm_active=0.45, running=64, waiting=20, kv=0.4, rps=6.0),
    Scenario("kv-cap", util=0.7, sm_active=0.6, running=40, waiting=12, kv=0.97, rps=4.0, preempt_per_s=0.5),
    # Story B overlapped: the engine thread at ~100% of a core, GPU busy 43%.
    Scenario("cpu-bound", util=0.43, sm_active=0.4, running=16, rps=8.0, thread_cpu=0.98, caps=Caps(max_num_seqs=32)),
    # The H200 32-element add loop: util 27%, SM active 0.04%.
    Scenario("launch-bound", util=0.27, sm_active=0.0004),
    # The H200's CUDA-graph small step: util 99%, SM active 28.5%.
    Scenario("small-kernels", util=0.99, sm_active=0.285, tensor=0.01, dram=0.02),
    # The H200's pinned host-to-device loop: 53.5 GB/s of Gen5 x16's 63, SM active 2.4%.
    Scenario("transfer-bound", util=0.025, sm_active=0.024, tensor=0.0, dram=0.03, pcie_rx=53.5e9),
    # The H200 under the engine's matmul and a rival's (bench/results/gpu_processes_h200.json).
    Scenario("contended", util=0.999, sm_active=0.882, tensor=0.812, dram=0.168, procs=((100, 0.36), (200, 0.64)), thread_cpu=0.3),
    # Saturated on compute: no alert of these five should fire.
    Scenario("healthy", util=0.98, sm_active=0.95, tensor=0.9, running=30, rps=5.0, caps=Caps(max_num_seqs=64)),
]  # fmt: skip


def snapshots(s: Scenario, n: int = 11) -> list[Snapshot]:
    out = []
    for i in range(n):
        t = float(i)
        gpus = ()
        if s.util is not None:
            gpus = (
                GpuSample(0, "GPU-1", "NVIDIA H200", "nvml", util=s.util, sm_active=s.sm_active,
                          tensor_active=s.tensor,
                          dram_active=s.dram if s.dram is not None else (0.2 if s.tensor else None),
                          pcie_rx_bytes_per_s=s.pcie_rx, pcie_tx_bytes_per_s=0.0 if s.pcie_rx else None,
                          pcie_link_gen=5 if s.pcie_rx else None,
                          pcie_link_width=16 if s.pcie_rx else None,
                          processes=None if s.procs is None else tuple(
                              GpuProcess(pid, memory_bytes=2**30, sm_share=sm)
                              for pid, sm in s.procs)),
            )  # fmt: skip
        engines = ()
        if s.running is not None:
            engines = (
                EngineSample(URL, "m", "0", running=s.running, waiting=s.waiting,
                             kv_cache_usage=s.kv, request_success_total=s.rps * t,
                             preemptions_total=s.preempt_per_s * t,
                             generation_tokens_total=100 * s.rps * t),
            )  # fmt: skip
        host = None
        if s.thread_cpu is not None:
            host = HostSample(
                cpu_count=8, cpu_total_seconds=8 * t, cpu_idle_seconds=6 * t,
                processes=(ProcessCpu(100, "vllm", 1.3 * t, (ThreadCpu(101, "EngineCore_0", s.thread_cpu * t),)),),
            )  # fmt: skip
        out.append(Snapshot(t=t, wall=1_700_000_000 + t, gpus=gpus, engines=engines, host=host))
    return out


def exported_series(view: View) -> list[tuple[str, dict[str, str], float]]:
    from prometheus_client.registry import CollectorRegistry

    registry = CollectorRegistry(auto_describe=False)
    for c in view_collectors(view):
        registry.register(c)
    text = generate_latest(registry).decode()
    return [
        (s.name, s.labels, s.value)
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    ]


def _series_selector(name: str, labels: dict[str, str]) -> str:
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return f"{name}{{{inner}}}"


def test_rules_and_python_diagnosis_name_the_same_causes(tmp_path: Path) -> None:
    tests = []
    expected_by_scenario = {}
    for sc in SCENARIOS:
        window = compute_window(snapshots(sc))
        diagnosis = diagnose(window, caps=sc.caps)
        # Alerts stand for confirmed verdicts: one the diagnosis hedges for a missing source
        # (e.g. CPU in the path inferred without host data) is not paged on.
        causes = {v.cause for v in diagnosis.verdicts if not v.missing}
        expected = sorted(ALERT_FOR_CAUSE[c] for c in causes if c in ALERT_FOR_CAUSE)
        if sc.name == "healthy":
            assert expected == [] and "compute-bound" in causes, causes
        else:
            # The scenario exercises what it is named for.
            assert sc.name in causes, (sc.name, causes)
        expected_by_scenario[sc.name] = expected
        series = [
            {
                "series": _series_selector(
                    name, {**labels, "instance": "box:9402", "job": "headroom"}
                ),
                "values": f"{value:g}x10",
            }
            for name, labels, value in exported_series(View(window, diagnosis))
        ]
        tests.append(
            {
                "name": f"{sc.name}: python says {sorted(causes)}",
                "interval": "1m",
                "input_series": series,
                "promql_expr_test": [
                    {
                        "expr": 'count by (alertname) (ALERTS{alertstate="firing",alertname=~"'
                        + "|".join(ALERT_FOR_CAUSE.values())
                        + '"})',
                        "eval_time": "6m",
                        "exp_samples": [
                            {"labels": f'{{alertname="{a}"}}', "value": 1} for a in expected
                        ],
                    }
                ],
            }
        )
    doc = {
        "rule_files": [str(f) for f in RULE_FILES],
        "evaluation_interval": "15s",
        "tests": tests,
    }
    test_file = tmp_path / "agreement_test.yml"
    test_file.write_text(yaml.safe_dump(doc, sort_keys=False))
    r = promtool("test", "rules", str(test_file))
    assert r.returncode == 0, r.stdout + r.stderr
    # Every alert this checks fired in some scenario (none passes by never firing).
    fired = {a for alerts in expected_by_scenario.values() for a in alerts}
    assert fired == set(ALERT_FOR_CAUSE.values()), expected_by_scenario
