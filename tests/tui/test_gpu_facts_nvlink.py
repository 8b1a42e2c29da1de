"""The GPU panel's facts line names NVLink traffic where links carry it, and only there."""

from __future__ import annotations

import pytest

from monitor.tui.widgets import gpu_facts

BASE = {"power_watts": 650.0, "sm_clock_hz": 1.98e9, "memory_used_bytes": 2**30}


def test_busy_links_show_on_the_facts_line() -> None:
    line = gpu_facts({**BASE, "nvlink_tx_bytes_per_s": 2.1e11, "nvlink_rx_bytes_per_s": 1.9e11})
    assert "NVLink 210 GB/s tx/190 GB/s rx" in line


@pytest.mark.parametrize("value", [0.0, None])
def test_a_lone_gpu_reading_zero_or_nothing_shows_no_nvlink(value: float | None) -> None:
    line = gpu_facts({**BASE, "nvlink_tx_bytes_per_s": value, "nvlink_rx_bytes_per_s": value})
    assert "NVLink" not in line
