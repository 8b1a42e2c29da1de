"""Replay the H200 workload recordings through today's sampler, window and diagnosis.

Each recording (tests/fixtures/gpu/h200/<workload>-1s.jsonl and -100ms.jsonl) holds the
raw snapshots headroom took on a real H200 while one known workload ran (NVML + GPM,
and the host source watching the workload's process). bench/gpu/run_suite.py recorded
them with a window of max(2 s, 5 ticks); the replay uses the same.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from replay_support import replay_reports, without_bill

from monitor.diagnosis import diagnose
from monitor.read.recording import read_recording
from monitor.sources.samples import GpuSample, Snapshot
from monitor.window.full import compute_window

GPU_FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "gpu"
H200 = GPU_FIXTURES / "h200"
SPANS = {"1s": 1.0, "100ms": 0.1}
SUMMARY = {w["workload"]: w for w in json.loads((GPU_FIXTURES / "record_summary.json").read_text())}

# What each workload is, so what the diagnosis must call it: (cause, scope).
EXPECTED: dict[str, tuple[str, str]] = {
    "idle": ("idle", "box"),
    "matmul": ("compute-bound", "gpu:0"),
    "copy": ("memory-bound", "gpu:0"),
    "tiny": ("launch-bound", "gpu:0"),
    "smallstep": ("launch-bound", "gpu:0"),
    # No engine source here, so CPU in the path is judged for the box from the busy thread.
    "storyb": ("cpu-bound", "box"),
    "storyb-overlap": ("cpu-bound", "box"),
    "decode-b64": ("memory-bound", "gpu:0"),
    "decode-b1": ("memory-bound", "gpu:0"),
    # CUDA graphs removed the launch gaps: what is left are kernels too small to fill the SMs.
    "smallstep-graph": ("small-kernels", "gpu:0"),
    # Pinned 256 MiB host-to-device copies, one small kernel each: PCIe at ~55 GB/s of Gen5
    # x16's 63 while no kernel runs (GPM's duty cycle ~0, nvidia-smi's ~100%): not idle.
    "h2d": ("transfer-bound", "gpu:0"),
}
# Recorded before the launch-bound rule asked for gaps and the memory-bound rule for a busy
# bus beside unsaturated SMs: their recorded verdicts are the old rules' (launch-bound and
# a box-wide unknown), so they are checked against EXPECTED, not against the recording.
CHANGED_SINCE_RECORDED = {"smallstep-graph", "decode-b1"}
CASES = [(w, s) for w in EXPECTED for s in SPANS]
# Recordings whose workload began its work after sampling began: the copy loop pinned its
# 256 MiB buffer for 2 s of the 1 s recording, and 5 s windows straddled that start.
STARTED_LATE = {("h2d", "1s"): 4}


@cache
def replay(workload: str, span: str) -> tuple[dict[str, Any], ...]:
    return replay_reports(H200 / f"{workload}-{span}.jsonl", SPANS[span])


def recorded(workload: str, span: str) -> list[Mapping[str, Any]]:
    ticks = read_recording(H200 / f"{workload}-{span}.jsonl").ticks
    return [t.report for t in ticks if t.report is not None]


def top(report: Mapping[str, Any]) -> Mapping[str, Any]:
    return report["verdicts"][0]


def said(report: Mapping[str, Any]) -> list[tuple[Any, ...]]:
    """What a user reads of each verdict (evidence may gain figures without changing it)."""
    keys = ("cause", "scope", "confidence", "summary", "fix", "since")
    return [
        tuple(without_bill(v[k]) if k == "summary" else v[k] for k in keys)
        for v in report["verdicts"]
    ]


@pytest.mark.parametrize(("workload", "span"), CASES)
def test_final_and_most_windows_name_the_workloads_cause(workload: str, span: str) -> None:
    reports = replay(workload, span)
    want = EXPECTED[workload]
    tops = [(top(r)["cause"], top(r)["scope"]) for r in reports]
    assert tops[-1] == want, [(v["cause"], v["scope"]) for v in reports[-1]["verdicts"]]
    # The first tick has no GPM reading yet and the next windows straddle the start.
    tops = tops[STARTED_LATE.get((workload, span), 0) :]
    assert tops.count(want) >= 0.75 * len(tops), tops


@pytest.mark.parametrize(("workload", "span"), CASES)
def test_replay_is_deterministic(workload: str, span: str) -> None:
    replay.cache_clear()
    first = replay(workload, span)
    replay.cache_clear()
    second = replay(workload, span)
    assert [r["verdicts"] for r in first] == [r["verdicts"] for r in second]


@pytest.mark.parametrize(
    ("workload", "span"), [c for c in CASES if c[0] not in CHANGED_SINCE_RECORDED]
)
def test_recorded_verdicts_equal_the_recomputed_ones(workload: str, span: str) -> None:
    live = recorded(workload, span)
    again = replay(workload, span)
    assert len(live) == len(again)
    assert [said(r) for r in live] == [said(r) for r in again]


@pytest.mark.parametrize("span", SPANS)
def test_rule_changes_show_in_the_recordings_made_before_them(span: str) -> None:
    # What the old rules said on these readings, and what today's say instead.
    def cause(report: Mapping[str, Any]) -> tuple[str, str]:
        return top(report)["cause"], top(report)["scope"]

    assert cause(recorded("smallstep-graph", span)[-1]) == ("launch-bound", "gpu:0")
    assert cause(recorded("decode-b1", span)[-1]) == ("unknown", "box")
    for workload in CHANGED_SINCE_RECORDED:
        assert cause(replay(workload, span)[-1]) == EXPECTED[workload]


def _evidence(verdict: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {e["name"]: e for e in verdict["evidence"]}


@pytest.mark.parametrize("span", SPANS)
def test_cuda_graph_step_is_never_launch_bound_but_small_kernels(span: str) -> None:
    reports = replay("smallstep-graph", span)
    for r in reports:
        assert "launch-bound" not in {v["cause"] for v in r["verdicts"]}
    final = reports[-1]
    gpu = final["gpus"][0]
    v = top(final)
    util, sm = gpu["util"], gpu["sm_active"]
    assert util > 0.98 and sm < 0.3  # busy all the time, SMs mostly idle
    assert f"the GPU is busy all the time with kernels too small to fill its SMs (util {100 * util:.0f}%, SM active {100 * sm:.0f}%)" in v["summary"]  # fmt: skip
    assert v["cause"] == "small-kernels" and "fuse kernels (torch.compile)" in v["fix"]
    assert 0.5 < v["confidence"] < 0.9
    ev = _evidence(v)
    assert ev["util"]["op"] == ">=" and ev["util"]["value"] >= ev["util"]["threshold"]
    assert ev["sm_active"]["value"] < ev["sm_active"]["threshold"]
    # The eager step on the same GPU: gaps between launches, and graphs as the fix.
    eager = top(replay("smallstep", span)[-1])
    assert eager["cause"] == "launch-bound" and "CUDA graphs" in eager["fix"]
    gap = _evidence(eager)["gap_share"]
    assert gap["value"] > 0.7 and gap["value"] > gap["threshold"]


def test_graph_summary_at_100ms_reads_util_99_sm_active_28() -> None:
    v = top(replay("smallstep-graph", "100ms")[-1])
    assert "(util 99%, SM active 28%)" in v["summary"]


@pytest.mark.parametrize("span", SPANS)
def test_batch_1_decode_is_memory_bound_with_less_confidence_than_batch_64(span: str) -> None:
    b1 = top(replay("decode-b1", span)[-1])
    b64 = top(replay("decode-b64", span)[-1])
    assert b1["cause"] == b64["cause"] == "memory-bound"
    assert 0.5 <= b1["confidence"] < b64["confidence"]
    ev = _evidence(b1)
    dram = ev["dram_active"]["value"]
    assert 0.5 < dram < 0.6  # ~55% of peak bandwidth, streamed every token
    assert ev["dram_active"]["value"] >= ev["dram_active"]["threshold"]
    assert ev["tensor_active"]["value"] <= ev["tensor_active"]["threshold"]
    assert f"DRAM bandwidth runs at {100 * dram:.0f}% of peak" in b1["summary"]
    assert "bigger batches" in b1["fix"]


@pytest.mark.parametrize(("workload", "busy"), [("storyb", 0.29), ("storyb-overlap", 0.43)])
@pytest.mark.parametrize("span", SPANS)
def test_story_b_busy_fraction_matches_the_step_timing(
    workload: str, busy: float, span: str
) -> None:
    final = replay(workload, span)[-1]
    measured = final["box"]["busy_fraction"]
    assert measured == pytest.approx(busy, abs=0.015)
    # The workload timed its own GPU and CPU parts: 12 ms / (12 + 28) ms, or 12 / 28 overlapped.
    expected = SUMMARY[workload]["workload_result"]["expected_busy_fraction"]
    assert measured == pytest.approx(expected, abs=0.015)
    v = top(final)
    assert _evidence(v)["busiest_thread_cpu_ratio"]["value"] >= 0.95


@pytest.mark.parametrize(("workload", "span"), [c for c in CASES if c[0] != "idle"])
def test_busy_workloads_are_confident_except_where_the_rules_hedge(
    workload: str, span: str
) -> None:
    conf = top(replay(workload, span)[-1])["confidence"]
    if workload in ("smallstep-graph", "decode-b1"):
        assert 0.6 <= conf < 0.9
    else:
        assert conf >= 0.7


# --- `headroom snapshot --json` outputs taken on the H200 --------------------------------


def _snapshot_json(name: str) -> dict[str, Any]:
    return json.loads((GPU_FIXTURES / f"snapshot-{name}.json").read_text())


def _diagnose_report_gpu(g: Mapping[str, Any]) -> str:
    """Today's diagnosis of the GPU figures that snapshot printed (a steady 3-tick window)."""
    fields = ("util", "sm_active", "sm_occupancy", "tensor_active", "dram_active")
    sample = GpuSample(0, g["uuid"], g["name"], g["source"], **{f: g[f] for f in fields})
    snaps = [Snapshot(t=float(i), wall=1_800_000_000.0 + i, gpus=(sample,)) for i in range(3)]
    return diagnose(compute_window(snaps)).verdicts[0].cause


def test_snapshot_during_matmul_shows_busy_tensor_cores() -> None:
    snap = _snapshot_json("matmul")
    g = snap["gpus"][0]
    assert g["name"] == "NVIDIA H200"
    assert g["util"] > 0.95 and g["sm_active"] > 0.9 and g["tensor_active"] > 0.85
    assert top(snap)["cause"] == "compute-bound"
    assert _diagnose_report_gpu(g) == "compute-bound"


def test_snapshot_during_tiny_kernels_shows_util_far_above_sm_active() -> None:
    snap = _snapshot_json("tiny")
    g = snap["gpus"][0]
    assert g["util"] > 0.15 and g["sm_active"] < 0.01
    assert g["util"] > 20 * g["sm_active"]
    assert top(snap)["cause"] == "launch-bound"
    assert _diagnose_report_gpu(g) == "launch-bound"


def test_snapshot_during_host_copies_names_transfer_bound_and_explains_nvidia_smi() -> None:
    """`headroom snapshot --json` on the H200 while pinned host-to-device copies ran."""
    snap = _snapshot_json("h2d")
    g = snap["gpus"][0]
    assert g["util"] < 0.05 and g["driver_util"] > 0.95  # GPM counts kernels, the driver copies
    assert g["pcie_rx_bytes_per_s"] > 0.5 * g["pcie_peak_bytes_per_s"] == 0.5 * 63.008e9
    assert "the driver counts copy-engine work as busy" in g["util_note"]
    top = snap["verdicts"][0]
    assert top["cause"] == "transfer-bound" and top["scope"] == "gpu:0"
    assert "Memcpy HtoD" in top["next"]
