"""NvmlSource over a fake pynvml: what a user would see on H200s, T4s, MIG and broken hosts."""

from __future__ import annotations

import json
import logging

import pynvml
import pytest
from fake_nvml import H200_READINGS, MIB, FakeGpu, FakeNvml, t4_gpu, workload_gpu

from monitor.core.errors import ConfigError, SourceUnavailable
from monitor.diagnosis import diagnose
from monitor.sources.base import Source
from monitor.sources.nvml import NvmlSource, throttle_names
from monitor.sources.samples import GpuSample, Snapshot
from monitor.window.full import compute_window
from monitor.window.stats import WindowStats

READINGS = json.loads(H200_READINGS.read_text())["runs"]


def two_reads(fake: FakeNvml, src: NvmlSource, seconds: float = 1.0) -> tuple[GpuSample, ...]:
    """First tick (no GPM yet), let time pass, second tick: return the second."""
    src.read()
    fake.advance(seconds)
    return src.read().gpus


def test_library_missing_is_one_clear_line() -> None:
    fake = FakeNvml([], init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
    with pytest.raises(SourceUnavailable) as err:
        NvmlSource(nvml=fake)
    assert str(err.value) == "NVML library not found: no NVIDIA driver on this host"


def test_real_pynvml_on_a_host_without_driver() -> None:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("this host has an NVIDIA driver")
    with pytest.raises(SourceUnavailable) as err:
        NvmlSource()
    assert "\n" not in str(err.value)
    assert "NVML" in str(err.value)


def test_driver_not_loaded_and_no_gpu() -> None:
    with pytest.raises(SourceUnavailable, match="driver not loaded"):
        NvmlSource(nvml=FakeNvml([], init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED))
    fake = FakeNvml([])
    with pytest.raises(SourceUnavailable, match="no GPU"):
        NvmlSource(nvml=fake)
    assert fake.calls["nvmlShutdown"] == 1  # NVML is not left initialised behind the error


def test_matmul_h200_reads_busy_tensor_cores() -> None:
    fake = FakeNvml([workload_gpu("matmul")])
    src = NvmlSource(nvml=fake)
    assert isinstance(src, Source)
    first = src.read().gpus[0]
    assert first.sm_active is None and first.tensor_active is None  # GPM needs two samples
    assert first.util is None and first.power_watts is not None
    fake.advance(1.0)
    (g,) = src.read().gpus
    assert g.source == "nvml" and g.name == "NVIDIA H200" and g.index == 0
    assert g.util == pytest.approx(1.0)
    assert g.sm_active == pytest.approx(0.965, abs=0.001)
    assert g.tensor_active == pytest.approx(0.937, abs=0.001)
    assert g.sm_occupancy == pytest.approx(0.143, abs=0.001)
    assert g.dram_active == pytest.approx(0.174, abs=0.001)
    assert g.fp32_active == 0.0 and g.fp16_active == 0.0  # measured zeros stay zeros
    assert g.power_watts == pytest.approx(693.0, abs=0.01)
    assert g.power_limit_watts == 700.0
    assert g.sm_clock_hz == 1410e6 and g.sm_clock_max_hz == 1980e6
    assert g.memory_total_bytes == 143771 * MIB
    assert g.memory_used_bytes == 600 * MIB
    # PCIe comes from GPM in MiB/s: 4.79 MiB/s is ~5.02 MB/s.
    assert g.pcie_tx_bytes_per_s == pytest.approx(4.79 * MIB)
    assert g.pcie_rx_bytes_per_s == pytest.approx(14.0 * MIB)


@pytest.mark.parametrize("run", ["idle", "matmul", "tiny", "copy"])
def test_each_h200_workload_matches_its_real_readings(run: str) -> None:
    fake = FakeNvml([workload_gpu(run)])
    src = NvmlSource(nvml=fake)
    g = two_reads(fake, src)[0]
    real = READINGS[run]["window_1s"][0]
    # On a GPM GPU util is GRAPHICS_UTIL: the duty cycle over exactly the tick.
    assert g.util == pytest.approx(real["GRAPHICS_UTIL"] / 100)
    assert abs(g.util - real["nvml_util_gpu"] / 100) < 0.03  # and it agrees with NVML's
    assert g.sm_active == pytest.approx(real["SM_UTIL"] / 100)
    assert g.tensor_active == pytest.approx(real["ANY_TENSOR_UTIL"] / 100)
    assert g.dram_active == pytest.approx(real["DRAM_BW_UTIL"] / 100)


def test_launch_bound_gpu_shows_util_without_sm_activity() -> None:
    fake = FakeNvml([workload_gpu("tiny")])
    g = two_reads(fake, NvmlSource(nvml=fake))[0]
    assert g.util is not None and g.sm_active is not None
    assert g.util > 0.2 and g.sm_active < 0.001


def test_util_is_mean_of_driver_samples_since_last_tick() -> None:
    # 50 ms bursts every second: the driver's 200 ms samples read 0,0,0,0,50, and the
    # point read (the last period only) says 0 -- a lottery.
    gpu = FakeGpu(util_pattern=[0, 0, 0, 0, 50], util_point=(0, 0), gpm=False)
    fake = FakeNvml([gpu])
    src = NvmlSource(nvml=fake)
    src.read()
    fake.advance(1.0)
    assert src.read().gpus[0].util == pytest.approx(0.10)
    # Only samples newer than the last tick count: a fully busy second reads 1.0.
    gpu.util_pattern = [100]
    fake.advance(1.0)
    assert src.read().gpus[0].util == pytest.approx(1.0)
    gpu.util_pattern = [30, 70]
    fake.advance(2.0)
    assert src.read().gpus[0].util == pytest.approx(0.5)
    assert fake.calls["nvmlDeviceGetUtilizationRates"] == 0


def test_tick_shorter_than_driver_period_keeps_last_mean() -> None:
    gpu = FakeGpu(util_pattern=[60], gpm=False)
    fake = FakeNvml([gpu])
    src = NvmlSource(nvml=fake)
    src.read()
    fake.advance(1.0)
    assert src.read().gpus[0].util == pytest.approx(0.6)
    fake.advance(0.1)  # no new driver sample yet: NVML answers NOT_FOUND
    assert src.read().gpus[0].util == pytest.approx(0.6)
    assert src.read().errors == ()


def test_point_read_fallback_when_samples_unsupported() -> None:
    gpu = FakeGpu(samples_supported=False, util_point=(37, 12), gpm=False)
    fake = FakeNvml([gpu])
    src = NvmlSource(nvml=fake)
    assert any("point read" in n for n in src.notes)
    g = two_reads(fake, src)[0]
    assert g.util == pytest.approx(0.37) and g.mem_util == pytest.approx(0.12)
    samples_calls = fake.calls["nvmlDeviceGetSamples"]
    src.read()
    assert fake.calls["nvmlDeviceGetSamples"] == samples_calls  # not asked again


def test_eight_gpus_one_metrics_call_per_gpu_per_tick_and_no_new_buffers() -> None:
    fake = FakeNvml([workload_gpu("matmul") for _ in range(8)])
    src = NvmlSource(nvml=fake)
    assert fake.gpm_allocs == 16  # two buffers per GPU, once
    ticks = 50
    for _ in range(ticks):
        fake.advance(1.0)
        reading = src.read()
    assert [g.index for g in reading.gpus] == list(range(8))
    assert len({g.uuid for g in reading.gpus}) == 8
    assert all(g.tensor_active == pytest.approx(0.937, abs=0.001) for g in reading.gpus)
    assert fake.gpm_allocs == 16
    assert fake.calls["nvmlGpmSampleGet"] == 8 * ticks
    assert fake.calls["nvmlGpmMetricsGet"] == 8 * (ticks - 1)
    assert set(fake.metrics_get_calls.values()) == {ticks - 1}
    assert set(fake.metrics_requested) == {11}  # all default metrics (+ util) in one call
    # Driver samples cost ~2.4 ms a call on an H200: a GPM GPU never asks for them.
    assert fake.calls["nvmlDeviceGetSamples"] == 0
    src.close()
    assert fake.gpm_frees == 16 and fake.calls["nvmlShutdown"] == 1


def test_gpm_values_follow_the_buffers_in_order() -> None:
    # The fake cycles SM_UTIL per sample and refuses out-of-order buffers, so a
    # wrong swap shows up as an error or a repeated value.
    gpu = FakeGpu(gpm_values={"SM_UTIL": [10.0, 20.0, 30.0, 40.0]})
    fake = FakeNvml([gpu])
    src = NvmlSource(nvml=fake, gpm_metrics=["SM_UTIL"])
    seen = []
    for _ in range(5):
        fake.advance(1.0)
        r = src.read()
        assert r.errors == ()
        seen.append(r.gpus[0].sm_active)
    assert seen == [None, 0.1, 0.2, 0.3, 0.4]


def test_t4_without_gpm_still_reports_nvml_fields_and_says_why_once() -> None:
    fake = FakeNvml([t4_gpu()])
    src = NvmlSource(nvml=fake)
    assert src.notes == (
        "GPU 0 (Tesla T4): no GPM (needs Hopper or newer); "
        "SM, tensor and DRAM activity unavailable -- use DCGM",
    )
    g = two_reads(fake, src)[0]
    assert g.util == pytest.approx(0.40)
    assert g.power_watts == pytest.approx(28.0) and g.temperature_c == 33.0
    for attr in ("sm_active", "sm_occupancy", "tensor_active", "dram_active"):
        assert getattr(g, attr) is None
    assert g.pcie_tx_bytes_per_s is None and g.nvlink_tx_bytes_per_s is None
    assert fake.gpm_allocs == 0 and fake.calls["nvmlGpmSampleGet"] == 0
    # PCIe throughput blocks 20 ms a call: the fake does not even offer it.
    assert "nvmlDeviceGetPcieThroughput" not in fake.calls


def test_mixed_host_notes_only_the_gpu_without_gpm() -> None:
    fake = FakeNvml([workload_gpu("matmul"), t4_gpu()])
    src = NvmlSource(nvml=fake)
    assert len(src.notes) == 1 and src.notes[0].startswith("GPU 1 (Tesla T4)")
    a, b = two_reads(fake, src)
    assert a.sm_active is not None and b.sm_active is None


def test_gpm_off_by_request() -> None:
    fake = FakeNvml([workload_gpu("matmul")])
    src = NvmlSource(nvml=fake, gpm=False)
    g = two_reads(fake, src)[0]
    assert g.util == pytest.approx(1.0) and g.sm_active is None
    assert src.notes == () and fake.gpm_allocs == 0


def test_mig_instances_are_their_own_samples() -> None:
    migs = {
        0: workload_gpu("matmul", name="NVIDIA H200 MIG 3g.71gb", memory_total=71 * 1024 * MIB),
        2: workload_gpu("copy", name="NVIDIA H200 MIG 3g.71gb", memory_total=71 * 1024 * MIB),
    }
    for m in migs.values():
        m.unsupported |= {
            "nvmlDeviceGetPowerUsage",
            "nvmlDeviceGetTemperature",
            "nvmlDeviceGetUtilizationRates",
            "nvmlDeviceGetEnforcedPowerLimit",
        }
        m.samples_supported = False
    parent = workload_gpu("idle", mig_enabled=True, migs=migs)
    fake = FakeNvml([parent])
    src = NvmlSource(nvml=fake)
    gpus = two_reads(fake, src)
    assert [(g.index, g.mig_parent) for g in gpus] == [(0, None), (0, 0), (2, 0)]
    whole, a, b = gpus
    assert a.uuid.startswith("MIG-") and a.memory_total_bytes == 71 * 1024 * MIB
    assert a.tensor_active == pytest.approx(0.937, abs=0.001)
    assert b.dram_active == pytest.approx(0.886, abs=0.001)
    assert a.power_watts is None and a.temperature_c is None
    assert a.util == pytest.approx(1.0) and b.util == pytest.approx(1.0)  # from GPM, per instance
    assert whole.power_watts == pytest.approx(121.663)
    assert fake.calls["nvmlGpmMigSampleGet"] == 4  # two instances, two ticks


def test_unsupported_field_is_none_logged_once_and_not_asked_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    gpu = workload_gpu("matmul", unsupported={"nvmlDeviceGetTemperature"})
    fake = FakeNvml([gpu])
    with caplog.at_level(logging.INFO, logger="monitor.sources.nvml"):
        src = NvmlSource(nvml=fake)
        for _ in range(5):
            fake.advance(1.0)
            r = src.read()
            assert r.gpus[0].temperature_c is None  # never 0
            assert r.gpus[0].power_watts is not None
            assert r.errors == ()
    assert fake.calls["nvmlDeviceGetTemperature"] == 1  # the probe at start
    msgs = [r.getMessage() for r in caplog.records if "temperature" in r.getMessage()]
    assert len(msgs) == 1 and "GPU 0" in msgs[0]


def test_util_falls_back_to_driver_samples_when_gpm_has_no_graphics_util() -> None:
    gpu = workload_gpu("matmul", gpm_unsupported={"GRAPHICS_UTIL"}, util_pattern=[80])
    fake = FakeNvml([gpu])
    src = NvmlSource(nvml=fake)
    assert fake.calls["nvmlDeviceGetSamples"] == 0
    for _ in range(3):
        fake.advance(1.0)
        g = src.read().gpus[0]
    assert g.util == pytest.approx(0.8) and g.sm_active is not None
    assert fake.metrics_requested == [11, 10]


def test_gpm_refused_for_good_frees_buffers_and_keeps_util() -> None:
    gpu = workload_gpu("matmul", util_pattern=[55])
    fake = FakeNvml([gpu])
    src = NvmlSource(nvml=fake)
    gpu.unsupported.add("nvmlGpmSampleGet")
    for _ in range(3):
        fake.advance(1.0)
        r = src.read()
    assert r.gpus[0].util == pytest.approx(0.55) and r.gpus[0].sm_active is None
    assert fake.gpm_frees == 2 and fake.calls["nvmlGpmSampleGet"] == 1


def test_unsupported_gpm_metric_is_dropped_from_the_request() -> None:
    # A PCIe H200 has no NVLink: those two metrics answer NOT_SUPPORTED.
    gpu = workload_gpu(
        "matmul", gpm_unsupported={"NVLINK_TOTAL_TX_PER_SEC", "NVLINK_TOTAL_RX_PER_SEC"}
    )
    fake = FakeNvml([gpu])
    src = NvmlSource(nvml=fake)
    for _ in range(4):
        fake.advance(1.0)
        g = src.read().gpus[0]
    assert g.nvlink_tx_bytes_per_s is None and g.sm_active is not None
    assert fake.metrics_requested == [11, 9, 9]


def test_lost_gpu_becomes_a_source_error_not_an_exception() -> None:
    good, bad = workload_gpu("matmul"), workload_gpu("matmul")
    fake = FakeNvml([good, bad])
    src = NvmlSource(nvml=fake)
    bad.lost = {"nvmlDeviceGetPowerUsage"}
    r = src.read()
    assert len(r.gpus) == 2 and r.gpus[1].power_watts is None
    assert [(e.source, e.target) for e in r.errors] == [("nvml", "GPU 1")]
    assert "lost" in r.errors[0].message and "\n" not in r.errors[0].message


def test_throttle_reasons_are_named() -> None:
    gpu = workload_gpu("matmul", throttle_mask=0x4 | 0x40)
    fake = FakeNvml([gpu])
    assert NvmlSource(nvml=fake).read().gpus[0].throttle_reasons == ("sw_power_cap", "hw_thermal")
    assert throttle_names(0) == ()
    assert throttle_names(0x1 | 0x2 | 0x8 | 0x10 | 0x20 | 0x80) == (
        "idle",
        "applications_clocks",
        "hw_slowdown",
        "sync_boost",
        "sw_thermal",
        "hw_power_brake",
    )


def test_indices_and_metric_choice() -> None:
    fake = FakeNvml([workload_gpu("idle"), workload_gpu("matmul")])
    src = NvmlSource(
        nvml=fake, indices=[1], gpm_metrics=["sm_util", "NVML_GPM_METRIC_DRAM_BW_UTIL"]
    )
    (g,) = two_reads(fake, src)
    assert g.index == 1 and g.sm_active == pytest.approx(0.9653)
    assert g.dram_active is not None and g.tensor_active is None
    assert fake.metrics_requested == [3]  # util's GRAPHICS_UTIL is always asked


def test_bad_configuration_is_one_line() -> None:
    with pytest.raises(ConfigError, match="GPU index 3 does not exist"):
        NvmlSource(nvml=FakeNvml([workload_gpu("idle")]), indices=[3])
    with pytest.raises(ConfigError, match="unknown GPM metric 'TENSOR'"):
        NvmlSource(nvml=FakeNvml([workload_gpu("idle")]), gpm_metrics=["TENSOR"])


def test_close_is_idempotent() -> None:
    fake = FakeNvml([workload_gpu("idle")])
    src = NvmlSource(nvml=fake)
    src.close()
    src.close()
    assert fake.calls["nvmlShutdown"] == 1 and fake.gpm_frees == 2


def test_util_span_asks_graphics_util_once_per_span_in_its_own_call() -> None:
    # GRAPHICS_UTIL costs ~1.8 ms of driver CPU per call on an H200: with a span it is
    # asked once per span, between the span's first sample and now.
    now = [0.0]
    fake = FakeNvml([workload_gpu("matmul")])
    src = NvmlSource(nvml=fake, util_every_s=5.0, clock=lambda: now[0])
    assert fake.gpm_allocs == 3
    utils = []
    for _ in range(12):
        now[0] += 1.0
        fake.advance(1.0)
        reading = src.read()
        assert reading.errors == ()
        utils.append(reading.gpus[0].util)
    assert utils[0] is None  # no span yet
    assert all(u is not None and u > 0.9 for u in utils[1:])
    per_tick = [n for n in fake.metrics_requested if n != 1]
    util_calls = [n for n in fake.metrics_requested if n == 1]
    assert per_tick == [10] * 11  # every tick, without GRAPHICS_UTIL
    assert len(util_calls) == 3  # ticks 2, 7 and 12
    assert fake.gpm_allocs == 3
    src.close()
    assert fake.gpm_frees == 3


def test_util_span_zero_keeps_util_in_the_one_call_per_tick() -> None:
    fake = FakeNvml([workload_gpu("matmul")])
    src = NvmlSource(nvml=fake, util_every_s=0.0)
    for _ in range(4):
        fake.advance(1.0)
        src.read()
    assert set(fake.metrics_requested) == {11}
    with pytest.raises(ConfigError):
        NvmlSource(nvml=FakeNvml([workload_gpu("matmul")]), util_every_s=-1)


# -- Several GPUs: NVLink and PCIe per GPU ---------------------------------------------


def tp_rank(rank: int, nvlink_mib_s: float) -> FakeGpu:
    """One rank of a tensor-parallel engine mid all-reduce: busy, SMs partly, links hot."""
    return FakeGpu(
        name="NVIDIA H100 80GB HBM3",
        util_pattern=[100],
        util_point=(100, 30),
        gpm_values={
            "GRAPHICS_UTIL": 100.0,
            "SM_UTIL": 42.0,
            "SM_OCCUPANCY": 5.0,
            "ANY_TENSOR_UTIL": 30.0,
            "DRAM_BW_UTIL": 25.0,
            "PCIE_TX_PER_SEC": 10.0 + rank,
            "PCIE_RX_PER_SEC": 20.0 + rank,
            "NVLINK_TOTAL_TX_PER_SEC": nvlink_mib_s + rank,
            "NVLINK_TOTAL_RX_PER_SEC": nvlink_mib_s + 2 * rank,
        },
    )


def window_of(fake: FakeNvml, src: NvmlSource, ticks: int = 4) -> WindowStats:
    snaps = []
    src.read()
    for i in range(ticks):
        fake.advance(1.0)
        snaps.append(Snapshot(t=float(i), wall=1.8e9 + i, gpus=src.read().gpus))
    return compute_window(snaps)


def test_eight_gpus_report_nvlink_and_pcie_per_gpu_in_bytes_per_s() -> None:
    mib_s = 200_000.0  # ~210 GB/s each way, ~47% of an H100's 900 GB/s both ways
    fake = FakeNvml([tp_rank(i, mib_s) for i in range(8)])
    src = NvmlSource(nvml=fake)
    gpus = two_reads(fake, src)
    assert [g.index for g in gpus] == list(range(8))
    for g in gpus:
        i = g.index
        assert g.nvlink_tx_bytes_per_s == pytest.approx((mib_s + i) * MIB)
        assert g.nvlink_rx_bytes_per_s == pytest.approx((mib_s + 2 * i) * MIB)
        assert g.pcie_tx_bytes_per_s == pytest.approx((10.0 + i) * MIB)
        assert g.pcie_rx_bytes_per_s == pytest.approx((20.0 + i) * MIB)
    # One GPM metrics call per GPU per tick, NVLink asked in the same call.
    assert set(fake.metrics_get_calls.values()) == {1}
    # Through the window and the diagnosis: the ranks wait on their links.
    d = diagnose(window_of(fake, src))
    assert d.top is not None and (d.top.cause, d.top.scope) == ("comm-bound", "box")


def test_single_h200_reading_nvlink_as_zero_is_never_comm_bound() -> None:
    # The lone H200 answers GPM's NVLink metrics with 0 (no peers on its links). A
    # busy GPU with SMs half used must keep its single-GPU diagnosis.
    gpu = workload_gpu(
        "matmul",
        gpm_values={
            "GRAPHICS_UTIL": 100.0, "SM_UTIL": 45.0, "ANY_TENSOR_UTIL": 5.0,
            "DRAM_BW_UTIL": 20.0, "NVLINK_TOTAL_TX_PER_SEC": 0.0,
            "NVLINK_TOTAL_RX_PER_SEC": 0.0,
        },
    )  # fmt: skip
    fake = FakeNvml([gpu])
    src = NvmlSource(nvml=fake)
    (g,) = two_reads(fake, src)
    assert g.nvlink_tx_bytes_per_s == 0.0 and g.nvlink_rx_bytes_per_s == 0.0
    causes = [v.cause for v in diagnose(window_of(fake, src)).verdicts]
    assert "comm-bound" not in causes and causes, causes


def test_gpus_without_nvlink_metrics_read_none_and_are_never_comm_bound() -> None:
    ranks = [tp_rank(i, 200_000.0) for i in range(2)]
    for r in ranks:
        r.gpm_unsupported = {"NVLINK_TOTAL_TX_PER_SEC", "NVLINK_TOTAL_RX_PER_SEC"}
    fake = FakeNvml(ranks)
    src = NvmlSource(nvml=fake)
    gpus = two_reads(fake, src)
    assert all(g.nvlink_tx_bytes_per_s is None for g in gpus)
    assert all(g.pcie_tx_bytes_per_s is not None for g in gpus)
    assert "comm-bound" not in [v.cause for v in diagnose(window_of(fake, src)).verdicts]
