"""The roofline placement, the peak table, and honest degradation when a source is missing."""

from __future__ import annotations

import pytest
from diag_windows import gpu, make_window

from monitor.diagnosis import GPU_PEAKS, Caps, diagnose, match_gpu
from monitor.diagnosis.peaks import peak_for_key
from monitor.window.scopes import engine_scope

T = 1e12


@pytest.mark.parametrize(
    ("name", "memory", "key"),
    [
        ("NVIDIA H100 80GB HBM3", None, "H100 SXM"),  # also the simulator's h100-sxm
        ("NVIDIA H100 PCIe", None, "H100 PCIe"),
        ("NVIDIA H100 NVL", None, "H100 NVL"),
        ("NVIDIA H200", None, "H200"),
        ("NVIDIA A100-SXM4-80GB", None, "A100 80GB"),
        ("NVIDIA A100-SXM4-40GB", None, "A100 40GB"),
        ("NVIDIA A100-PCIE", 40 * 2**30, "A100 40GB"),
        ("NVIDIA L40S", None, "L40S"),
        ("NVIDIA B200", None, "B200"),
        ("Tesla T4", None, None),
    ],
)
def test_peak_table_matches_nvml_names(name: str, memory: int | None, key: str | None) -> None:
    peak = match_gpu(name, memory)
    assert (peak.name if peak else None) == key


def test_peak_keys_are_forgiving() -> None:
    assert peak_for_key("h200") is GPU_PEAKS["H200"]
    assert peak_for_key("a100-80gb") is GPU_PEAKS["A100 80GB"]
    assert peak_for_key("T4") is None


NO_CAPS = Caps()


def _roof(flops: float, byts: float, caps: Caps = NO_CAPS, gpus=None) -> dict:
    w = make_window(
        gpus=gpus if gpus is not None else [gpu(0.9, 0.85, 0.4, 0.4)],
        engine=dict(running=32, rps=3.2, e2e_s=10.0, flops_per_s=flops, bytes_per_s=byts),
    )
    return diagnose(w, caps=caps).analyses[engine_scope(w.engines[0])]["roofline"]


def test_roofline_on_the_compute_side_of_an_h200() -> None:
    r = _roof(300 * T, 1.2 * T)
    assert r["gpu"] == "H200"
    assert r["arithmetic_intensity"] == pytest.approx(250.0)
    assert r["ridge_intensity"] == pytest.approx(989.4 / 4.8)
    assert r["mfu"] == pytest.approx(300 / 989.4, rel=1e-4)
    assert r["bandwidth_share"] == pytest.approx(0.25)
    assert r["side"] == "compute"


def test_roofline_on_the_memory_side_and_at_fp8() -> None:
    r = _roof(50 * T, 2.4 * T)
    assert r["side"] == "memory"
    assert r["bandwidth_share"] == pytest.approx(0.5)
    fp8 = _roof(50 * T, 2.4 * T, Caps(precision="fp8"))
    assert fp8["mfu"] == pytest.approx(50 / 1978.9, rel=1e-4)
    assert fp8["ridge_intensity"] == pytest.approx(2 * r["ridge_intensity"], rel=1e-3)


def test_roofline_without_gpu_data_uses_the_given_gpu() -> None:
    r = _roof(300 * T, 1.2 * T, Caps(gpu="H100 SXM"), gpus=[])
    assert r["gpu"] == "H100 SXM"
    # 250 FLOP/B sits above the H200's ridge (206) but below the H100 SXM's (295).
    assert r["ridge_intensity"] == pytest.approx(989.4 / 3.35)
    assert r["side"] == "memory"
    # Unknown GPU: the achieved figures still show, the peak-relative ones do not.
    r = _roof(300 * T, 1.2 * T, gpus=[])
    assert r["achieved_flops_per_s"] == pytest.approx(300 * T)
    assert r["mfu"] is None and r["side"] is None


def test_roofline_decides_saturation_side_when_sm_metrics_are_missing() -> None:
    no_gpm = gpu(0.98)
    w = make_window(
        gpus=[no_gpm],
        engine=dict(running=60, rps=6.0, e2e_s=10.0, flops_per_s=50 * T, bytes_per_s=2.4 * T),
    )
    top = diagnose(w, caps=Caps(max_num_seqs=64)).verdicts[0]
    assert top.cause == "memory-bound"
    assert top.missing == ("gpm",)
    assert top.confidence <= 0.5
    # And without the engine's counters it says it cannot tell.
    top = diagnose(make_window(gpus=[no_gpm])).verdicts[0]
    assert top.cause == "unknown" and top.missing == ("gpm",)
    assert "GPM" in top.fix


def test_without_gpu_data_engine_causes_still_work_and_say_what_is_missing() -> None:
    light = dict(running=10, rps=1.0, e2e_s=10.0, queue_s=0.0)
    with_gpu = diagnose(
        make_window(gpus=[gpu(1.0, 0.89, 0.05, 0.82)], engine=light), caps=Caps(max_num_seqs=64)
    )
    without = diagnose(make_window(engine=light), caps=Caps(max_num_seqs=64))
    assert without.verdicts[0].cause == "starved"
    assert without.verdicts[0].missing == ("gpu",)
    assert "no GPU data" in without.verdicts[0].summary
    assert without.verdicts[0].confidence < with_gpu.verdicts[0].confidence
    assert without.analyses["box"]["busy_fraction"] is None

    kv = diagnose(make_window(engine=dict(running=20, waiting=6, kv=0.97, preempt_per_s=0.5)))
    assert kv.verdicts[0].cause == "kv-cap"
    assert not any(e.name.startswith("gpu") for e in kv.verdicts[0].evidence)

    idle = diagnose(make_window(engine=dict(running=0))).verdicts[0]
    assert (idle.cause, idle.missing) == ("idle", ("gpu",))


def test_without_gpu_data_cpu_bound_is_weak_and_ranks_after_engine_causes() -> None:
    d = diagnose(
        make_window(engine=dict(running=4, waiting=8), host=dict(thread=1.0)),
    )
    assert [v.cause for v in d.verdicts] == ["seq-cap", "cpu-bound"]
    cpu = d.verdicts[1]
    assert cpu.missing == ("gpu",) and cpu.confidence < 0.5
    assert "without GPU data" in cpu.summary


def test_without_gpu_data_and_no_engine_cause_the_verdict_is_unknown_naming_the_gpu() -> None:
    d = diagnose(make_window(engine=dict(running=200, rps=20.0, e2e_s=10.0)))
    top = d.verdicts[0]
    assert top.cause == "unknown"
    assert top.missing == ("gpu",)
    assert "GPU" in top.summary


def test_without_host_data_cpu_bound_is_inferred_from_gpu_gaps_and_says_so() -> None:
    # Requests run in every sample, so the engine steps back to back, yet the GPU idles 75%
    # of the time: host work sits between the steps. Without host data, that is inferred.
    parts = dict(n=8, gpus=[gpu(0.25, 0.2)], engine=dict(running=[3, 9, 5, 12, 2, 7, 10, 4]))
    cpu = next(v for v in diagnose(make_window(**parts)).verdicts if v.cause == "cpu-bound")
    assert cpu.missing == ("host",)
    assert "no host data" in cpu.summary
    confirmed = next(
        v
        for v in diagnose(make_window(**parts, host=dict(thread=1.0))).verdicts
        if v.cause == "cpu-bound"
    )
    assert confirmed.missing == () and confirmed.confidence > cpu.confidence
    # A host source that sees no busy engine thread weakens the inference further.
    cold = next(
        v
        for v in diagnose(make_window(**parts, host=dict(thread=0.1))).verdicts
        if v.cause == "cpu-bound"
    )
    assert cold.confidence < cpu.confidence and "other threads" in cold.summary


def test_gpu_only_box_with_a_hot_thread_is_cpu_bound() -> None:
    # No engine source (a bare workload): GPU busy 30%, one thread at a full core.
    d = diagnose(make_window(gpus=[gpu(0.3, 0.28)], host=dict(thread=1.0, thread_name="python")))
    top = d.verdicts[0]
    assert (top.cause, top.scope, top.missing) == ("cpu-bound", "box", ("engine",))


def test_the_public_surface_is_complete() -> None:
    import monitor.diagnosis as d

    for name in ("Thresholds", "Caps", "Diagnosis", "diagnose", "Diagnoser", "Verdict",
                 "Evidence", "CAUSES", "GPU_PEAKS", "load_thresholds"):  # fmt: skip
        assert name in d.__all__
    assert all(hasattr(d, name) for name in d.__all__)
