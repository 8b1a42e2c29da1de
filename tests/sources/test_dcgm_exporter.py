"""dcgm-exporter's /metrics as GPU samples: units, labels, MIG, both DCGM namings."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import closing

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monitor.core.errors import EndpointError
from monitor.sources.base import Reading, Source
from monitor.sources.dcgm_exporter import DcgmExporterSource, gpu_page_beside, gpus_from_text
from monitor.sources.samples import GpuSample, Snapshot
from monitor.window.full import compute_window

T4 = "dcgm-exporter-metrics-t4-prof-dcgm-issue191.txt"
MIB = 1024 * 1024


def read_once(url: str, **kwargs: object) -> Reading:
    with closing(DcgmExporterSource(url, **kwargs)) as src:  # type: ignore[arg-type]
        return src.read()


def test_t4_page_gives_both_gpus_with_their_kubernetes_labels(
    http_server, read_fixture: Callable[[str], str]
) -> None:
    http_server.set("/metrics", read_fixture(T4))
    with closing(DcgmExporterSource(http_server.url)) as src:
        assert isinstance(src, Source) and src.name == "dcgm-exporter"
        assert src.url == http_server.url + "/metrics"
        reading = src.read()
    assert reading.errors == ()
    g0, g1 = reading.gpus
    assert (g0.index, g0.uuid, g0.name) == (
        0,
        "GPU-84412445-5790-0b3f-f714-da8aa3b2c0b0",
        "Tesla T4",
    )
    assert (g1.index, g1.uuid) == (1, "GPU-4812b59b-1f1a-430f-d8a4-69d2ee8c18bb")
    assert {g.source for g in reading.gpus} == {"dcgm-exporter"}
    # The profiling fields present read 0 (idle GPUs)...
    assert (g0.sm_active, g0.sm_occupancy, g0.tensor_active) == (0.0, 0.0, 0.0)
    # ...and those the exporter did not publish are unknown, not 0.
    assert (g0.util, g0.dram_active, g0.power_watts, g0.memory_used_bytes) == (None,) * 4
    labels0, labels1 = dict(g0.labels), dict(g1.labels)
    assert labels0["pod"] == "triton-84d57987c9-kks4k"
    assert labels0["namespace"] == "default"
    assert labels0["container"] == "triton-server"
    assert labels0["Hostname"] == "gke-test-dcgm-default-pool-fed1e979-tt7p"
    assert "pod" not in labels1 and "namespace" not in labels1 and "container" not in labels1
    assert labels1["Hostname"] == labels0["Hostname"]
    assert "UUID" not in labels0 and "gpu" not in labels0 and "modelName" not in labels0


LABELS = 'gpu="0",UUID="GPU-aaaa",device="nvidia0",modelName="NVIDIA H200",Hostname="n1"'

DCGM_46 = f"""\
DCGM_FI_DEV_GPU_UTIL_RATIO{{{LABELS}}} 0.93
DCGM_FI_DEV_MEM_COPY_UTIL{{{LABELS}}} 41
DCGM_FI_PROF_SM_UTIL_RATIO{{{LABELS}}} 0.81
DCGM_FI_PROF_SM_OCCUPANCY_RATIO{{{LABELS}}} 0.22
DCGM_FI_PROF_TENSOR_UTIL_RATIO{{{LABELS}}} 0.64
DCGM_FI_PROF_DRAM_UTIL_RATIO{{{LABELS}}} 0.35
DCGM_FI_PROF_FP16_UTIL_RATIO{{{LABELS}}} 0.05
DCGM_FI_PROF_FP32_UTIL_RATIO{{{LABELS}}} 0.11
DCGM_FI_PROF_PCIE_TX_BYTES{{{LABELS}}} 1.5e9
DCGM_FI_PROF_PCIE_RX_BYTES{{{LABELS}}} 2.5e9
DCGM_FI_PROF_NVLINK_TX_BYTES{{{LABELS}}} 3e10
DCGM_FI_PROF_NVLINK_RX_BYTES{{{LABELS}}} 4e10
DCGM_FI_DEV_FB_USED{{{LABELS}}} 120000
DCGM_FI_DEV_FB_FREE{{{LABELS}}} 20000
DCGM_FI_DEV_FB_RESERVED{{{LABELS}}} 1000
DCGM_FI_DEV_BOARD_POWER_WATTS{{{LABELS}}} 612.5
DCGM_FI_DEV_SM_CLOCK{{{LABELS}}} 1980
DCGM_FI_DEV_GPU_TEMP_CELSIUS{{{LABELS}}} 61
"""


def _one(text: str) -> GpuSample:
    (g,), skipped = gpus_from_text(text, "http://h:9400/metrics")
    assert skipped == 0
    return g


def test_dcgm_46_names_map_to_the_same_fields_in_base_units() -> None:
    g = _one(DCGM_46)
    assert (g.index, g.uuid, g.name) == (0, "GPU-aaaa", "NVIDIA H200")
    assert g.util == pytest.approx(0.93)
    assert g.mem_util == pytest.approx(0.41)  # percent -> ratio
    assert (g.sm_active, g.sm_occupancy, g.tensor_active, g.dram_active) == (0.81, 0.22, 0.64, 0.35)
    assert (g.fp16_active, g.fp32_active) == (0.05, 0.11)
    assert (g.pcie_tx_bytes_per_s, g.pcie_rx_bytes_per_s) == (1.5e9, 2.5e9)
    assert (g.nvlink_tx_bytes_per_s, g.nvlink_rx_bytes_per_s) == (3e10, 4e10)
    assert g.memory_used_bytes == 120000 * MIB
    assert g.memory_total_bytes == (120000 + 20000 + 1000) * MIB
    assert g.power_watts == 612.5
    assert g.sm_clock_hz == 1.98e9
    assert g.temperature_c == 61.0


def test_pre_46_names_with_percent_utilisation() -> None:
    old = (
        DCGM_46.replace("DCGM_FI_DEV_GPU_UTIL_RATIO", "DCGM_FI_DEV_GPU_UTIL")
        .replace("} 0.93", "} 93")
        .replace("PROF_SM_UTIL_RATIO", "PROF_SM_ACTIVE")
        .replace("PROF_TENSOR_UTIL_RATIO", "PROF_PIPE_TENSOR_ACTIVE")
        .replace("BOARD_POWER_WATTS", "POWER_USAGE")
        .replace("GPU_TEMP_CELSIUS", "GPU_TEMP")
    )
    old += f"DCGM_FI_DEV_FB_TOTAL{{{LABELS}}} 143771\n"
    g = _one(old)
    assert g.util == pytest.approx(0.93)
    assert (g.sm_active, g.tensor_active) == (0.81, 0.64)
    assert (g.power_watts, g.temperature_c) == (612.5, 61.0)
    assert g.memory_total_bytes == 143771 * MIB  # the exporter's total wins over a sum


def test_a_gpu_util_ratio_on_the_percent_scale_is_still_a_ratio() -> None:
    g = _one(f"DCGM_FI_DEV_GPU_UTIL_RATIO{{{LABELS}}} 57\n")
    assert g.util == pytest.approx(0.57)


MIG = """\
DCGM_FI_PROF_SM_ACTIVE{gpu="0",UUID="GPU-p",modelName="NVIDIA A100",GPU_I_PROFILE="3g.20gb",GPU_I_ID="1"} 0.5
DCGM_FI_PROF_SM_ACTIVE{gpu="0",UUID="GPU-p",modelName="NVIDIA A100",GPU_I_PROFILE="1g.5gb",GPU_I_ID="13"} 0.1
DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-p",modelName="NVIDIA A100",GPU_I_PROFILE="3g.20gb",GPU_I_ID="1"} 100
DCGM_FI_PROF_SM_ACTIVE{gpu="1",UUID="GPU-q",modelName="NVIDIA A100"} 0.9
"""


def test_mig_instances_are_separate_samples_under_their_parent() -> None:
    gpus, _ = gpus_from_text(MIG, "http://h:9400/metrics")
    mig1, mig13, whole = gpus
    assert (mig1.mig_parent, mig1.index, mig1.sm_active) == (0, 1, 0.5)
    assert (mig13.mig_parent, mig13.index, mig13.sm_active) == (0, 13, 0.1)
    assert mig1.name == "NVIDIA A100 MIG 3g.20gb"
    assert mig1.uuid != mig13.uuid and "GPU-p" in mig1.uuid
    assert mig1.memory_used_bytes == 100 * MIB and mig13.memory_used_bytes is None
    assert dict(mig1.labels)["GPU_I_PROFILE"] == "3g.20gb"
    assert (whole.index, whole.mig_parent, whole.sm_active) == (1, None, 0.9)
    # The window keeps the instances apart too.
    snap = Snapshot(t=0.0, wall=1e9, gpus=gpus)
    windows = compute_window([snap, Snapshot(t=1.0, wall=1e9 + 1, gpus=gpus)]).gpus
    assert sorted(round(w.sm_active, 2) for w in windows) == [0.1, 0.5, 0.9]


def test_a_page_without_dcgm_fields_says_so(http_server) -> None:
    http_server.set("/metrics", "<html>dashboard</html>", content_type="text/html")
    (err,) = read_once(http_server.url).errors
    assert err.source == "dcgm-exporter"
    assert err.message == (
        f"{http_server.url}/metrics does not serve dcgm-exporter metrics "
        "(no DCGM_FI_ families found)"
    )


def test_an_exporter_without_any_field_we_read_says_which_to_add(http_server) -> None:
    http_server.set("/metrics", 'DCGM_FI_DEV_XID_ERRORS{gpu="0",UUID="GPU-a"} 0\n')
    (err,) = read_once(http_server.url).errors
    assert "serves none of the DCGM fields headroom reads" in err.message
    assert "DCGM_FI_PROF_SM_ACTIVE" in err.message


def test_down_and_failing_exporters_are_one_line_errors(http_server) -> None:
    http_server.set("/metrics", "oops", status=503)
    (err,) = read_once(http_server.url).errors
    assert err.message == f"{http_server.url}/metrics answered HTTP 503 Service Unavailable"
    url = http_server.url
    http_server.stop()
    (err,) = read_once(url).errors
    assert err.message == f"cannot connect to {url}/metrics: connection refused"


def test_a_gpu_page_beside_the_engine_is_found_and_nothing_else_is(
    http_server, read_fixture: Callable[[str], str]
) -> None:
    """`headroom sim` serves its GPU at /gpu/metrics beside the engine's /metrics: a sweep
    given only the engine's URL finds it. A page that is missing, not dcgm-exporter's, or
    a host that is down is no GPU page, and no error."""
    engine = f"{http_server.url}/metrics"
    assert gpu_page_beside(engine) is None  # 404
    http_server.set("/gpu/metrics", "<html>dashboard</html>", content_type="text/html")
    assert gpu_page_beside(engine) is None
    http_server.set("/gpu/metrics", read_fixture(T4))
    assert gpu_page_beside(engine) == f"{http_server.url}/gpu/metrics"
    assert gpu_page_beside(http_server.url) == f"{http_server.url}/gpu/metrics"
    url = http_server.url
    http_server.stop()
    assert gpu_page_beside(url, timeout=1.0) is None


FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(
    st.lists(
        st.sampled_from(DCGM_46.splitlines() + MIG.splitlines())
        .flatmap(lambda line: st.integers(0, len(line)).map(lambda i: (line, i)))
        .map(lambda li: li[0][: li[1]] + li[0][li[1] :].replace('"', "", 1)),
        max_size=10,
    )
)
def test_garbled_pages_never_raise_out_of_the_parser(lines: list[str]) -> None:
    try:
        gpus, _ = gpus_from_text("\n".join(lines), "http://h/metrics")
    except EndpointError:
        return
    for g in gpus:
        assert g.util is None or 0 <= g.util


def test_total_energy_counter_mj_becomes_joules() -> None:
    g = _one(DCGM_46 + f"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{{LABELS}}} 123456789\n")
    assert g.energy_joules == pytest.approx(123456.789) and g.energy_source == "counter"
    assert _one(DCGM_46).energy_joules is None  # not published: unknown, not 0
    # As dcgm-exporter types it (default-counters.csv: counter).
    typed = (
        "# HELP DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION Total energy consumption since boot (in mJ).\n"
        "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter\n"
        f"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{{LABELS}}} 2000\n"
    )
    assert _one(DCGM_46 + typed).energy_joules == pytest.approx(2.0)
