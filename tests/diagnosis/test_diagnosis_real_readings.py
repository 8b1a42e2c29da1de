"""Real readings: an H200 under known workloads (NVML + GPM), and vLLM 0.32 under load."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from monitor.diagnosis import Diagnoser, diagnose
from monitor.sources.samples import GpuSample, Snapshot
from monitor.window.full import compute_window
from monitor.window.scopes import engine_scope

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
H200 = json.loads((FIXTURES / "h200-nvml-gpm-readings.json").read_text())


def _gpu_sample(reading: dict[str, Any]) -> GpuSample:
    """One window of the fixture as the NVML source would report it (percent -> ratio)."""

    def ratio(key: str) -> float | None:
        return reading[key] / 100.0 if key in reading else None

    return GpuSample(
        index=0,
        uuid="GPU-h200",
        name="NVIDIA H200",
        source="nvml",
        util=reading["nvml_util_gpu"] / 100.0,
        mem_util=ratio("nvml_util_mem"),
        sm_active=ratio("SM_UTIL"),
        sm_occupancy=ratio("SM_OCCUPANCY"),
        tensor_active=ratio("ANY_TENSOR_UTIL"),
        dram_active=ratio("DRAM_BW_UTIL"),
        power_watts=reading.get("power_w"),
    )


def _h200_window(run: str, span: str):
    readings = H200["runs"][run][span]
    step = 1.0 if span == "window_1s" else 0.1
    snaps = [
        Snapshot(t=i * step, wall=1_800_000_000.0 + i * step, gpus=(_gpu_sample(r),))
        for i, r in enumerate(readings)
    ]
    return compute_window(snaps)


@pytest.mark.parametrize("span", ["window_1s", "window_0.1s"])
@pytest.mark.parametrize(
    ("run", "cause", "scope"),
    [
        ("matmul", "compute-bound", "gpu:0"),
        ("copy", "memory-bound", "gpu:0"),
        ("tiny", "launch-bound", "gpu:0"),
        ("idle", "idle", "box"),
    ],
)
def test_h200_workloads_get_their_cause(run: str, cause: str, scope: str, span: str) -> None:
    d = diagnose(_h200_window(run, span))
    top = d.verdicts[0]
    assert (top.cause, top.scope) == (cause, scope), [(v.cause, v.scope) for v in d.verdicts]
    assert top.confidence >= 0.8
    # Only one GPU-side cause per GPU: the readings are unambiguous.
    assert len([v for v in d.verdicts if v.scope == "gpu:0"]) <= 1


def test_h200_tiny_kernels_evidence_shows_util_against_sm_active() -> None:
    top = diagnose(_h200_window("tiny", "window_1s")).verdicts[0]
    ev = {e.name: e for e in top.evidence}
    assert ev["util"].value == pytest.approx((29 + 23 + 28) / 300)
    assert ev["sm_active"].value < ev["sm_active"].threshold
    assert "CUDA graphs" in top.fix


def test_h200_matmul_is_not_memory_bound_nor_launch_bound() -> None:
    causes = {v.cause for v in diagnose(_h200_window("matmul", "window_1s")).verdicts}
    assert causes == {"compute-bound"}


def _vllm_under_load_window(ticks: int = 5):
    from monitor.sources.vllm import engines_from_text

    text = (FIXTURES / "vllm-0.32.0-cpu-metrics-under-load.txt").read_text()
    engines, _ = engines_from_text(text, "http://127.0.0.1:8000/metrics")
    # The capture is one scrape; a steady load reads the same gauges tick after tick.
    snaps = [Snapshot(t=float(i), wall=1_800_000_000.0 + i, engines=engines) for i in range(ticks)]
    return compute_window(snaps)


def test_vllm_under_load_is_seq_cap_with_an_inferred_cap_of_4() -> None:
    w = _vllm_under_load_window()
    assert (w.engines[0].running_mean, w.engines[0].waiting_mean) == (4.0, 8.0)
    d = diagnose(w)
    top = d.verdicts[0]
    assert top.cause == "seq-cap"
    assert "--max-num-seqs" in top.fix and "above 4" in top.fix
    assert "inferred" in top.summary
    a = d.analyses[engine_scope(w.engines[0])]
    assert a["seq_cap"] == 4 and a["seq_cap_inferred"] is True
    # A CPU-only server: no GPU data, and the verdict says so instead of pretending.
    assert top.missing == ("gpu",)
    assert "gpu" in d.analyses["box"]["missing"]
    # vLLM's FLOP counters read 0 here: no roofline rather than a zero one.
    assert a["roofline"] is None


def test_vllm_under_load_first_window_of_a_diagnoser_already_names_seq_cap() -> None:
    d = Diagnoser().update(_vllm_under_load_window(3))
    assert d.verdicts[0].cause == "seq-cap"
    assert d.verdicts[0].since == 1_800_000_002.0
