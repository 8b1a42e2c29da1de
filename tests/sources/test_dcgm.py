"""DcgmSource over fake DCGM bindings: what a user sees with and without a host engine."""

from __future__ import annotations

import sys

import pytest
from fake_dcgm import BLANK, FakeEngine, install

from monitor.core.errors import SourceUnavailable
from monitor.sources.base import Source
from monitor.sources.dcgm import DcgmSource

MIB = 1024 * 1024

# An A100 under a matmul: device fields in DCGM's units (%, W, MHz, MiB, C),
# profiling fields as DCGM gives them (ratios, bytes/s).
A100 = {
    100: 1410,
    112: 0x4,
    113: 1410,
    150: 61,
    155: 382.5,
    156: 7_200_000_000,
    164: 400.0,
    203: 100,
    204: 31,
    250: 81920,
    252: 40000,
    1002: 0.93,
    1003: 0.21,
    1004: 0.78,
    1005: 0.35,
    1007: 0.01,
    1008: 0.0,
    1009: 2.5e8,
    1010: 1.2e9,
    1011: 0.0,
    1012: 0.0,
}
# The two Tesla T4s of the dcgm-exporter fixture (issue 191): profiling fields at 0.
T4 = {
    100: 585,
    112: 0x1,
    113: 1590,
    150: 40,
    155: 27.3,
    164: 70.0,
    203: 0,
    204: 0,
    250: 15360,
    252: 3,
    1002: 0.0,
    1003: 0.0,
    1004: 0.0,
}


def engine_with(*rows: tuple[str, str, dict[int, object]], **kw: object) -> FakeEngine:
    return FakeEngine(gpus={i: (u, n, dict(v)) for i, (u, n, v) in enumerate(rows)}, **kw)  # type: ignore[arg-type]


def test_bindings_missing_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pydcgm", None)  # import pydcgm -> ImportError
    with pytest.raises(SourceUnavailable) as err:
        DcgmSource()
    assert "pydcgm" in str(err.value) and "\n" not in str(err.value)


def test_no_host_engine_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, engine_with(("GPU-a", "NVIDIA A100", A100), address="10.0.0.9:5555"))
    with pytest.raises(SourceUnavailable) as err:
        DcgmSource()
    assert str(err.value).startswith(
        "DCGM: no host engine answers at localhost:5555 (start nv-hostengine)"
    )
    assert "\n" not in str(err.value)


def test_a100_profiling_fields_in_base_units(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = engine_with(("GPU-a", "NVIDIA A100-SXM4-80GB", A100), address="gpu-box:5555")
    install(monkeypatch, engine)
    src = DcgmSource(host="gpu-box:5555", interval=0.5)
    assert isinstance(src, Source) and src.notes == ()
    assert engine.connects == ["gpu-box:5555"]
    assert {freq for _, _, freq in engine.watches} == {500_000}
    (g,) = src.read().gpus
    assert (g.index, g.uuid, g.name, g.source) == (0, "GPU-a", "NVIDIA A100-SXM4-80GB", "dcgm")
    assert g.util == 1.0 and g.mem_util == pytest.approx(0.31)
    assert g.sm_active == pytest.approx(0.93) and g.tensor_active == pytest.approx(0.78)
    assert g.sm_occupancy == pytest.approx(0.21) and g.dram_active == pytest.approx(0.35)
    assert g.fp32_active == pytest.approx(0.01) and g.fp16_active == 0.0
    assert g.pcie_tx_bytes_per_s == 2.5e8 and g.pcie_rx_bytes_per_s == 1.2e9
    assert g.nvlink_tx_bytes_per_s == 0.0
    assert g.power_watts == 382.5 and g.power_limit_watts == 400.0
    assert g.sm_clock_hz == 1410e6 and g.sm_clock_max_hz == 1410e6
    assert g.temperature_c == 61.0 and g.throttle_reasons == ("sw_power_cap",)
    assert g.memory_total_bytes == 81920 * MIB and g.memory_used_bytes == 40000 * MIB


def test_every_watched_field_id_is_dcgms(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = engine_with(("GPU-a", "NVIDIA A100", A100))
    install(monkeypatch, engine)
    DcgmSource()
    watched = sorted(f for _, fields, _ in engine.watches for f in fields)
    # dcgm_fields.py: SM clock 100, clock-event reasons 112, max SM clock 113, GPU temp 150,
    # power 155, total energy 156, enforced limit 164, GPU util 203, mem copy util 204,
    # FB total 250, FB used 252,
    # and the profiling fields 1002-1005, 1007-1012.
    assert watched == [
        100,
        112,
        113,
        150,
        155,
        156,
        164,
        203,
        204,
        250,
        252,
        1002,
        1003,
        1004,
        1005,
        1007,
        1008,
        1009,
        1010,
        1011,
        1012,
    ]


def test_profiling_refused_keeps_device_fields_and_notes_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    engine = engine_with(("GPU-t0", "Tesla T4", T4), ("GPU-t1", "Tesla T4", T4), profiling=False)
    install(monkeypatch, engine)
    src = DcgmSource()
    assert len(src.notes) == 1 and "profiling fields unavailable" in src.notes[0]
    gpus = src.read().gpus
    assert [g.index for g in gpus] == [0, 1]
    assert gpus[0].sm_active is None and gpus[0].util == 0.0
    assert gpus[0].power_watts == pytest.approx(27.3) and gpus[0].throttle_reasons == ("idle",)


def test_blank_is_none_never_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    row = {**A100, 1004: BLANK, 150: BLANK}
    install(monkeypatch, engine_with(("GPU-a", "NVIDIA A100", row)))
    (g,) = DcgmSource().read().gpus
    assert g.tensor_active is None and g.temperature_c is None
    assert g.sm_active == pytest.approx(0.93)


def test_engine_lost_after_start_is_a_source_error(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = engine_with(("GPU-a", "NVIDIA A100", A100))
    install(monkeypatch, engine)
    src = DcgmSource()
    engine.down = True
    r = src.read()
    assert r.gpus == ()
    assert [(e.source, e.target) for e in r.errors] == [("dcgm", "localhost:5555")]
    assert "disconnected" in r.errors[0].message


def test_indices_and_close(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = engine_with(("GPU-a", "A", A100), ("GPU-b", "B", A100), ("GPU-c", "C", T4))
    install(monkeypatch, engine)
    src = DcgmSource(indices=[2])
    assert [g.uuid for g in src.read().gpus] == ["GPU-c"]
    src.close()
    src.close()
    assert len(engine.unwatched) == 2 and len(engine.deleted_groups) == 1
    assert engine.shutdowns == 1
    with pytest.raises(SourceUnavailable, match="has no GPU 5"):
        DcgmSource(indices=[5])
    assert engine.shutdowns == 2  # a failed start disconnects too


def test_total_energy_counter_in_joules_marked_counter(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = engine_with(("GPU-a", "NVIDIA A100-SXM4-80GB", A100))
    install(monkeypatch, engine)
    (g,) = DcgmSource().read().gpus
    assert g.energy_joules == pytest.approx(7_200_000.0)  # 156 is mJ since driver load
    assert g.energy_source == "counter"


def test_no_energy_field_is_none_not_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = engine_with(("GPU-a", "NVIDIA A100", {k: v for k, v in A100.items() if k != 156}))
    install(monkeypatch, engine)
    (g,) = DcgmSource().read().gpus
    assert g.energy_joules is None and g.energy_source is None
