"""The GPU-side rules at their boundaries: launch gaps, small kernels, DRAM dominance.

Each row is one GPU reading held steady over a window, the cause it must or must not
get on gpu:0, and the threshold it sits beside (E either side of it).
"""

from __future__ import annotations

import dataclasses

import pytest

from monitor.diagnosis import Thresholds, diagnose
from monitor.diagnosis.verdict import Verdict
from monitor.sources.samples import GpuSample, Snapshot
from monitor.window.full import compute_window

E = 1e-3
TH = Thresholds()


def gpu_verdicts(
    util: float,
    sm: float | None,
    tensor: float | None = None,
    dram: float | None = None,
    th: Thresholds = TH,
) -> dict[str, Verdict]:
    sample = GpuSample(
        0, "GPU-0", "NVIDIA H200", "nvml", util=util, sm_active=sm,
        tensor_active=tensor, dram_active=dram,
    )  # fmt: skip
    snaps = [Snapshot(t=float(i), wall=1_800_000_000.0 + i, gpus=(sample,)) for i in range(3)]
    verdicts = diagnose(compute_window(snaps), th).verdicts
    return {v.cause: v for v in verdicts if v.scope == "gpu:0"}


# The H200's CUDA-graph small step and batch-1 decode, as the replay windows read them.
GRAPH = (0.99, 0.285, 0.006, 0.018)
DECODE_B1 = (0.835, 0.583, 0.023, 0.555)

# (label, (util, sm, tensor, dram), cause on gpu:0, present)
ROWS: list[tuple[str, tuple[float, float | None, float | None, float | None], str, bool]] = [
    # launch-bound needs gaps: util below launch_util_max (0.95).
    ("launch below util max", (0.95 - E, 0.0, 0.0, 0.0), "launch-bound", True),
    ("no launch at util max", (0.95 + E, 0.0, 0.0, 0.0), "launch-bound", False),
    ("launch with gaps, sm below ratio", (0.9, 0.27 - E, 0.0, 0.0), "launch-bound", True),
    ("the graph step is not launch-bound", GRAPH, "launch-bound", False),
    # No gaps, SMs below sm_active_high (0.7), tensor and DRAM low: small kernels.
    ("small kernels at util max", (0.95 + E, 0.0, 0.0, 0.0), "small-kernels", True),
    ("no small kernels below util max", (0.95 - E, 0.5, 0.0, 0.0), "small-kernels", False),
    ("small kernels below sm_active_high", (0.99, 0.7 - E, 0.1, 0.1), "small-kernels", True),
    ("no small kernels at sm_active_high", (0.99, 0.7 + E, 0.1, 0.1), "small-kernels", False),
    ("small kernels below tensor_high", (0.99, 0.5, 0.5 - E, 0.1), "small-kernels", True),
    ("no small kernels at tensor_high", (0.99, 0.5, 0.5 + E, 0.1), "small-kernels", False),
    # DRAM 0.499 is under 3x tensor 0.2: neither memory nor ruled out by dram_high.
    ("small kernels below dram_high", (0.99, 0.5, 0.2, 0.5 - E), "small-kernels", True),
    ("no small kernels at dram_high", (0.99, 0.5, 0.2, 0.5 + E), "small-kernels", False),
    ("the graph step is small kernels", GRAPH, "small-kernels", True),
    # Busy GPU, SMs not saturated: memory-bound when DRAM >= dram_dominant_min (0.4) ...
    ("memory at dram_dominant_min", (0.9, 0.6, 0.0, 0.4 + E), "memory-bound", True),
    ("no memory below dram_dominant_min", (0.9, 0.6, 0.0, 0.4 - E), "memory-bound", False),
    # ... and DRAM >= dram_tensor_ratio (3) x tensor.
    ("memory at dram_tensor_ratio", (0.9, 0.6, 0.2, 0.6 + E), "memory-bound", True),
    ("no memory below dram_tensor_ratio", (0.9, 0.6, 0.2, 0.6 - E), "memory-bound", False),
    # ... and util at least util_saturated (0.8).
    ("memory at util_saturated", (0.8 + E, 0.6, 0.02, 0.55), "memory-bound", True),
    ("no memory below util_saturated", (0.8 - E, 0.6, 0.02, 0.55), "memory-bound", False),
    ("no dominance without a tensor reading", (0.9, 0.6, None, 0.55), "memory-bound", False),
    ("the batch-1 decode is memory-bound", DECODE_B1, "memory-bound", True),
    # With the SMs saturated, dram_high (0.5) alone still decides, as before.
    ("saturated SMs: memory at dram_high", (0.95, 0.9, 0.0, 0.5 + E), "memory-bound", True),
    ("saturated SMs: no memory below dram_high", (0.95, 0.9, 0.0, 0.45), "memory-bound", False),
    # Compute-bound is untouched: the H200 matmul.
    ("matmul is compute-bound", (0.993, 0.958, 0.930, 0.170), "compute-bound", True),
    ("matmul is not memory-bound", (0.993, 0.958, 0.930, 0.170), "memory-bound", False),
]


@pytest.mark.parametrize(
    ("reading", "cause", "present"), [r[1:] for r in ROWS], ids=[r[0] for r in ROWS]
)
def test_gpu_rule_boundaries(
    reading: tuple[float, float | None, float | None, float | None], cause: str, present: bool
) -> None:
    assert (cause in gpu_verdicts(*reading)) is present, gpu_verdicts(*reading)


def test_one_gpu_cause_per_reading() -> None:
    # Launch-bound, small kernels and the memory rules never describe one GPU twice.
    for _, reading, _, _ in ROWS:
        assert len(gpu_verdicts(*reading)) <= 1, reading


def test_dram_dominance_is_less_sure_than_a_saturated_bus() -> None:
    dominant = gpu_verdicts(*DECODE_B1)["memory-bound"]
    saturated = gpu_verdicts(0.99, 0.98, 0.0, 0.88)["memory-bound"]  # the H200 copy loop
    assert 0.5 <= dominant.confidence < saturated.confidence
    ev = {e.name: e for e in dominant.evidence}
    assert (ev["dram_active"].value, ev["dram_active"].op) == (0.555, ">=")
    assert ev["dram_active"].threshold == TH.dram_dominant_min
    assert ev["tensor_active"].threshold == pytest.approx(0.555 / TH.dram_tensor_ratio)
    assert "56% of peak" in dominant.summary


def test_small_kernels_verdict_says_why_and_what_to_do() -> None:
    v = gpu_verdicts(*GRAPH)["small-kernels"]
    assert 0.5 < v.confidence < 0.9  # a named cause, hedged below a saturated GPU's
    assert (
        "the GPU is busy all the time with kernels too small to fill its SMs "
        "(util 99%, SM active 28%)" in v.summary
    )
    assert "fuse kernels (torch.compile)" in v.fix and "--max-num-seqs" in v.fix
    assert "less tensor parallelism" in v.fix
    ev = {e.name: e for e in v.evidence}
    assert (ev["util"].threshold, ev["util"].op) == (TH.launch_util_max, ">=")
    assert (ev["sm_active"].threshold, ev["sm_active"].op) == (TH.sm_active_high, "<")


def test_launch_bound_evidence_shows_the_gaps() -> None:
    v = gpu_verdicts(0.26, 0.054, 0.001, 0.003)["launch-bound"]  # the eager small step
    gap = {e.name: e for e in v.evidence}["gap_share"]
    assert gap.value == pytest.approx(0.74)
    assert (gap.op, gap.threshold) == (">", pytest.approx(1 - TH.launch_util_max))


def test_new_thresholds_are_configurable() -> None:
    no_cap = dataclasses.replace(TH, launch_util_max=1.01)
    assert "launch-bound" in gpu_verdicts(*GRAPH, th=no_cap)
    strict = dataclasses.replace(TH, dram_dominant_min=0.6)
    assert "memory-bound" not in gpu_verdicts(*DECODE_B1, th=strict)
    ratio = dataclasses.replace(TH, dram_tensor_ratio=30.0)
    assert "memory-bound" not in gpu_verdicts(*DECODE_B1, th=ratio)


def test_small_kernels_without_tensor_or_dram_readings_says_they_were_not_read() -> None:
    v = gpu_verdicts(0.99, 0.2)["small-kernels"]
    assert "(util 99%, SM active 20%)" in v.summary
    assert "tensor cores (not read) nor DRAM (not read)" in v.summary
