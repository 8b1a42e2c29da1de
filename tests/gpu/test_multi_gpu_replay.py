"""Replay the multi-GPU recordings (two and four H200s) through today's sampler, window and diagnosis.

bench/gpu/run_multi.py recorded them on a real machine with several GPUs while one
known workload ran on every GPU (one process per GPU, NCCL, NVLink multicast off):
NVML + GPM on every GPU and the host source watching the ranks, at 1 s and 100 ms,
with a window of max(2 s, 5 ticks); the replay uses the same.

- allreduce: a loop of 256 MiB all-reduces: the links busy, the tensor cores idle.
- compute: a bf16 matmul loop on each GPU, no communication.
- tp-matmul: a tensor-parallel MLP whose all-reduce is a large share of each layer.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import pytest
from replay_support import replay_reports

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "gpu"
# Each box recorded on its own lent machine, all GPUs linked by NVLink (NV18 each pair).
BOXES = {"h200x2": 2, "h200x4": 4}
SPANS = {"1s": 1.0, "100ms": 0.1}
EXPECTED = {"allreduce": "comm-bound", "compute": "compute-bound", "tp-matmul": "comm-bound"}
CASES = [(b, w, s) for b in BOXES for w in EXPECTED for s in SPANS]
# Ticks whose top verdict must name the workload's cause, once the window has filled.
AGREE_SHARE = 0.8


def path(box: str, workload: str, span: str) -> Path:
    return FIXTURES / box / f"{workload}-{span}.jsonl"


@cache
def replay(box: str, workload: str, span: str) -> tuple[dict[str, Any], ...]:
    return replay_reports(path(box, workload, span), SPANS[span])


def settled(box: str, workload: str, span: str) -> list[dict[str, Any]]:
    """The reports from the third tick on: the workload ran steadily before recording
    began (a warm-up), and GPM's first tick has no activity yet, so from then on each
    report has at least two ticks of readings behind it."""
    reports = list(replay(box, workload, span))[2:]
    assert len(reports) >= 3, f"{box}/{workload}-{span}: too few ticks ({len(reports) + 2})"
    return reports


@pytest.mark.parametrize("box,workload,span", CASES)
def test_recording_holds_every_gpu(box: str, workload: str, span: str) -> None:
    assert path(box, workload, span).is_file(), f"missing {path(box, workload, span)}"
    for report in settled(box, workload, span):
        assert len(report["gpus"]) == BOXES[box]


@pytest.mark.parametrize("box,workload,span", CASES)
def test_replay_names_the_workload_cause(box: str, workload: str, span: str) -> None:
    reports = settled(box, workload, span)
    tops = [r["verdicts"][0]["cause"] for r in reports]
    expected = EXPECTED[workload]
    agree = sum(t == expected for t in tops) / len(tops)
    assert agree >= AGREE_SHARE, (box, workload, span, tops)
    assert tops[-1] == expected, tops
    last = reports[-1]
    if expected == "comm-bound":
        top = last["verdicts"][0]
        assert top["scope"] == "box" and "nvidia-smi topo -m" in top["fix"]
    else:
        # Each GPU computes on its own: one compute-bound verdict per GPU, no comm-bound.
        scopes = {v["scope"] for v in last["verdicts"] if v["cause"] == "compute-bound"}
        assert len(scopes) == len(last["gpus"])
        assert "comm-bound" not in [v["cause"] for v in last["verdicts"]]


def nvlink_mean(box: str, workload: str, span: str) -> list[float]:
    """Each GPU's NVLink tx + rx over the settled reports, bytes/s."""
    reports = settled(box, workload, span)
    out = []
    for i in range(len(reports[-1]["gpus"])):
        vals = [
            (r["gpus"][i].get("nvlink_tx_bytes_per_s") or 0.0)
            + (r["gpus"][i].get("nvlink_rx_bytes_per_s") or 0.0)
            for r in reports
        ]
        out.append(sum(vals) / len(vals))
    return out


@pytest.mark.parametrize("box,span", [(b, s) for b in BOXES for s in SPANS])
def test_nvlink_traffic_is_read_per_gpu(box: str, span: str) -> None:
    ar = nvlink_mean(box, "allreduce", span)
    tp = nvlink_mean(box, "tp-matmul", span)
    mm = nvlink_mean(box, "compute", span)
    # Every rank's links carry the all-reduce; the matmul loop sends next to nothing.
    assert min(ar) > 50e9, ar
    assert min(tp) > 10 * max(max(mm), 1e6), (tp, mm)
    assert max(mm) < 0.05 * min(ar), (mm, ar)
