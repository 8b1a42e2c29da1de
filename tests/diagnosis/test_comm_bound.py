"""Comm-bound: the GPUs of one tensor-parallel engine waiting on their all-reduces.

Table-driven at each threshold's boundary, plus the cases that must never read as
comm-bound: one GPU (NVLink 0 or unread, as the single H200 reads it) and a
multi-GPU box whose tensor cores are saturated.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from diag_windows import gpu, make_window

from monitor.diagnosis import Caps, Thresholds, diagnose
from monitor.diagnosis.comm_rules import COMM_FIX
from monitor.diagnosis.peaks import GPU_PEAKS
from monitor.sources.samples import GpuSample

H200_NVLINK = GPU_PEAKS["H200"].nvlink_bytes_per_s
assert H200_NVLINK == 900e9


def rank(
    index: int,
    util: float = 1.0,
    sm: float | None = 0.5,
    tensor: float | None = 0.25,
    dram: float | None = 0.25,
    nvlink: float | None = 200e9,  # each way
    name: str = "NVIDIA H200",
) -> GpuSample:
    g = gpu(util, sm, tensor, dram, index=index, name=name)
    return dataclasses.replace(g, nvlink_tx_bytes_per_s=nvlink, nvlink_rx_bytes_per_s=nvlink)


def box(n: int = 4, **kw: Any) -> list[GpuSample]:
    return [rank(i, **kw) for i in range(n)]


DEFAULT_TH = Thresholds()
NO_CAPS = Caps()


def causes(
    gpus: list[GpuSample], th: Thresholds = DEFAULT_TH, caps: Caps = NO_CAPS
) -> list[tuple[str, str]]:
    d = diagnose(make_window(gpus=gpus), th, caps)
    return [(v.cause, v.scope) for v in d.verdicts]


def test_tensor_parallel_box_waiting_on_nvlink_is_comm_bound_first() -> None:
    d = diagnose(make_window(gpus=box(4)))
    top = d.top
    assert top is not None and (top.cause, top.scope) == ("comm-bound", "box")
    assert top.fix == COMM_FIX and "nvidia-smi topo -m" in top.fix
    ev = {e.name: e for e in top.evidence}
    assert ev["gpus"].value == 4
    assert ev["nvlink_bytes_per_s_min"].value == 400e9
    assert ev["nvlink_share_min"].value == pytest.approx(400 / 900)
    assert "400 GB/s over NVLink (44% of peak)" in top.summary
    # The ranks' low SM share is the collectives' doing: no per-GPU verdict besides.
    assert [v.cause for v in d.verdicts] == ["comm-bound"]


# (name, the box's GPUs, thresholds, comm-bound expected)
SHARE_EDGE = 0.2 * H200_NVLINK / 2  # each way, so tx + rx sits exactly at the threshold
BOUNDARIES: list[tuple[str, list[GpuSample], Thresholds, bool]] = [
    ("nvlink at the share", box(2, nvlink=SHARE_EDGE), Thresholds(), True),
    ("nvlink just below", box(2, nvlink=SHARE_EDGE - 1e6), Thresholds(), False),
    # Dyadic values: a window's mean of 0.8s is 0.7999..., not 0.8.
    ("util at saturated", box(2, util=0.875), Thresholds(util_saturated=0.875), True),
    ("util just below", box(2, util=0.87), Thresholds(util_saturated=0.875), False),
    ("sm just below high", box(2, sm=0.62), Thresholds(sm_active_high=0.625), True),
    ("sm at high", box(2, sm=0.625), Thresholds(sm_active_high=0.625), False),
    ("tensor just below high", box(2, tensor=0.49), Thresholds(), True),
    ("tensor at high", box(2, tensor=0.5), Thresholds(), False),
    ("sm spread at max", [rank(0, sm=0.375), rank(1, sm=0.5)], Thresholds(comm_spread_max=0.125), True),
    ("sm spread over max", [rank(0, sm=0.375), rank(1, sm=0.5)], Thresholds(comm_spread_max=0.12), False),
    ("tensor spread over max", [rank(0, tensor=0.0), rank(1, tensor=0.25)], Thresholds(), False),
    ("unknown GPU at the floor", box(2, nvlink=50e9, name="Mystery GPU"), Thresholds(), True),
    ("unknown GPU below the floor", box(2, nvlink=50e9 - 1e6, name="Mystery GPU"), Thresholds(), False),
    ("one rank's NVLink unread", [rank(0), rank(1, nvlink=None)], Thresholds(), False),
    ("one rank's SM unread", [rank(0), rank(1, sm=None)], Thresholds(), False),
]  # fmt: skip


@pytest.mark.parametrize(
    "gpus,th,expected", [c[1:] for c in BOUNDARIES], ids=[c[0] for c in BOUNDARIES]
)
def test_comm_bound_boundaries(gpus: list[GpuSample], th: Thresholds, expected: bool) -> None:
    found = [c for c, _ in causes(gpus, th)]
    assert ("comm-bound" in found) is expected, found
    if expected:
        assert found[0] == "comm-bound"


@pytest.mark.parametrize("nvlink", [0.0, None])
def test_single_gpu_reading_nvlink_as_zero_or_unread_is_never_comm_bound(
    nvlink: float | None,
) -> None:
    # The single H200 reads GPM's NVLink metrics as 0; other GPUs may not read them at all.
    # Busy, SMs half used, tensor idle: whatever it is, it is not waiting on peers.
    found = causes([rank(0, sm=0.5, tensor=0.0, dram=0.3, nvlink=nvlink)])
    assert "comm-bound" not in [c for c, _ in found]
    assert found[0][0] == "small-kernels"  # the small-kernel story, as before


def test_one_gpu_with_nvlink_traffic_is_not_a_tensor_parallel_group() -> None:
    # Traffic on one GPU's links with no peer in the window: its peers are elsewhere.
    assert "comm-bound" not in [c for c, _ in causes([rank(0, nvlink=400e9)])]


def test_several_gpus_reading_nvlink_zero_keep_their_per_gpu_verdicts() -> None:
    tiny = [rank(i, util=0.5, sm=0.01, tensor=0.0, dram=0.0, nvlink=0.0) for i in range(8)]
    found = causes(tiny)
    assert {c for c, _ in found} == {"launch-bound"} and len(found) == 8


def test_compute_bound_multi_gpu_box_stays_compute_bound() -> None:
    # Tensor-parallel ranks in long matmuls: NVLink busy between layers, tensor cores
    # saturated: the compute, not the links, sets the pace.
    gpus = box(4, util=1.0, sm=0.965, tensor=0.937, dram=0.174, nvlink=300e9)
    found = causes(gpus)
    assert [c for c, _ in found] == ["compute-bound"] * 4
    assert len({s for _, s in found}) == 4  # one per GPU


def test_comm_bound_speaks_for_what_would_read_as_launch_bound() -> None:
    # An all-reduce loop: NCCL kernels hold a few SMs; a dip in util below 0.95 with SM
    # active 0.2 reads as launch-bound on one GPU. With the links busy on every rank, the
    # GPU waits on its peers, not on launches.
    ar: dict[str, Any] = dict(util=0.93, sm=0.2, tensor=0.0, dram=0.5, nvlink=350e9)
    without_links = causes(box(2, **{**ar, "nvlink": 0.0}))
    # Without the links' story: launch-bound first, and memory-bound for the DRAM traffic.
    assert without_links[0][0] == "launch-bound"
    assert {c for c, _ in without_links} == {"launch-bound", "memory-bound"}
    assert [c for c, _ in causes(box(2, **ar))] == ["comm-bound"]


def test_without_tensor_activity_comm_bound_is_less_sure() -> None:
    d = diagnose(make_window(gpus=box(2, tensor=None)))
    assert d.top is not None and d.top.cause == "comm-bound"
    assert d.top.confidence == 0.7 and d.top.missing == ("gpm",)
    full = diagnose(make_window(gpus=box(2)))
    assert full.top is not None and full.top.confidence == 0.85


def test_an_idle_gpu_beside_the_group_is_a_side_note() -> None:
    gpus = box(2) + [rank(2, util=0.0, sm=0.0, tensor=0.0, dram=0.0, nvlink=0.0)]
    found = causes(gpus)
    assert found[0] == ("comm-bound", "box")
    assert [c for c, _ in found[1:]] == ["idle"] and found[1][1] != "box"


def test_caps_gpu_names_the_peak_for_an_unmatched_name() -> None:
    # 50+50 GB/s: above the unknown-GPU floor (100 GB/s), but only 11% of an H200's peak.
    gpus = box(2, nvlink=50e9, name="Mystery GPU")
    assert causes(gpus)[0][0] == "comm-bound"
    assert "comm-bound" not in [c for c, _ in causes(gpus, caps=Caps(gpu="H200"))]


def test_comm_bound_thresholds_load_from_the_example_config() -> None:
    from pathlib import Path

    from monitor.diagnosis.thresholds import load_thresholds

    example = Path(__file__).resolve().parents[2] / "configs" / "headroom.example.toml"
    th = load_thresholds(example)
    assert (th.nvlink_share_min, th.nvlink_bytes_min, th.comm_spread_max) == (
        Thresholds().nvlink_share_min,
        Thresholds().nvlink_bytes_min,
        Thresholds().comm_spread_max,
    )
