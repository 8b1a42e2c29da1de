"""CPU of each NVML call headroom's NVML source makes, on a real GPU.

The calls run one after another as a tick makes them, first spaced 0.5 s apart (cold caches, as
an agent ticking once a second pays them), then back to back (warm), while a bf16 matmul loop
keeps the GPU busy. Each figure is the calling thread's CPU (time.thread_time: the driver's work
in this thread included) and its wall time, in microseconds per call.

    python bench/gpu/nvml_call_cost.py > bench/results/nvml_call_cost_h200.txt
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pynvml as nv

ROOT = Path(__file__).resolve().parents[2]
GPM_METRICS = (
    "SM_UTIL", "SM_OCCUPANCY", "ANY_TENSOR_UTIL", "DRAM_BW_UTIL", "FP16_UTIL", "FP32_UTIL",
    "PCIE_TX_PER_SEC", "PCIE_RX_PER_SEC", "NVLINK_TOTAL_TX_PER_SEC", "NVLINK_TOTAL_RX_PER_SEC",
)  # fmt: skip


def gpm_request(names: tuple[str, ...], first: Any, second: Any) -> Any:
    req = nv.c_nvmlGpmMetricsGet_t()
    req.version = nv.NVML_GPM_METRICS_GET_VERSION
    req.numMetrics = len(names)
    for i, name in enumerate(names):
        req.metrics[i].metricId = getattr(nv, f"NVML_GPM_METRIC_{name}")
    req.sample1, req.sample2 = first, second
    return req


def calls(handle: Any) -> dict[str, Callable[[], Any]]:
    first, second = nv.nvmlGpmSampleAlloc(), nv.nvmlGpmSampleAlloc()
    nv.nvmlGpmSampleGet(handle, first)
    ten = gpm_request(GPM_METRICS, first, second)
    util = gpm_request(("GRAPHICS_UTIL",), first, second)
    return {
        "memory": lambda: nv.nvmlDeviceGetMemoryInfo(handle),
        "power": lambda: nv.nvmlDeviceGetPowerUsage(handle),
        "sm_clock": lambda: nv.nvmlDeviceGetClockInfo(handle, nv.NVML_CLOCK_SM),
        "throttle": lambda: nv.nvmlDeviceGetCurrentClocksEventReasons(handle),
        "temperature": lambda: nv.nvmlDeviceGetTemperature(handle, nv.NVML_TEMPERATURE_GPU),
        "util_point": lambda: nv.nvmlDeviceGetUtilizationRates(handle),
        "gpm_sample": lambda: nv.nvmlGpmSampleGet(handle, second),
        "gpm_10_metrics": lambda: nv.nvmlGpmMetricsGet(ten),
        "gpm_graphics_util": lambda: nv.nvmlGpmMetricsGet(util),
        "compute_processes": lambda: nv.nvmlDeviceGetComputeRunningProcesses(handle),
        "graphics_processes": lambda: nv.nvmlDeviceGetGraphicsRunningProcesses(handle),
        "process_utilization": lambda: nv.nvmlDeviceGetProcessUtilization(handle, 0),
        "util_samples": lambda: nv.nvmlDeviceGetSamples(handle, nv.NVML_GPU_UTILIZATION_SAMPLES, 0),
    }


def power_variants(handle: Any) -> dict[str, Callable[[], Any]]:
    """The board's power, each way NVML gives it (the agent reads nvmlDeviceGetPowerUsage)."""
    return {
        "power": lambda: nv.nvmlDeviceGetPowerUsage(handle),
        "power_field_average": lambda: nv.nvmlDeviceGetFieldValues(
            handle, [nv.NVML_FI_DEV_POWER_AVERAGE]
        ),
        "power_field_instant": lambda: nv.nvmlDeviceGetFieldValues(
            handle, [nv.NVML_FI_DEV_POWER_INSTANT]
        ),
        "total_energy": lambda: nv.nvmlDeviceGetTotalEnergyConsumption(handle),
    }


def measure(table: dict[str, Callable[[], Any]], gap: float, rounds: int) -> str:
    cpu: Counter[str] = Counter()
    wall: Counter[str] = Counter()
    for _ in range(rounds):
        for name, call in table.items():
            c0, w0 = time.thread_time(), time.perf_counter()
            try:
                call()
            except nv.NVMLError:
                pass  # NOT_FOUND (no new sample) costs what it costs
            cpu[name] += time.thread_time() - c0
            wall[name] += time.perf_counter() - w0
        if gap:
            time.sleep(gap)
    return "\n".join(
        f"  {name:20s} {cpu[name] / rounds * 1e6:7.0f} us CPU  {wall[name] / rounds * 1e6:7.0f} us wall"
        for name in table
    )


def main() -> None:
    workload = subprocess.Popen(
        [sys.executable, str(ROOT / "bench/gpu/workloads.py"), "matmul", "--seconds", "80"],
        stdout=subprocess.DEVNULL,
    )
    try:
        time.sleep(5)
        nv.nvmlInit()
        handle = nv.nvmlDeviceGetHandleByIndex(0)
        print(f"# NVML call cost on {nv.nvmlDeviceGetName(handle)}, a bf16 matmul loop running")
        table = calls(handle)
        print("# spaced 0.5 s apart, 20 rounds (cold):")
        print(measure(table, 0.5, 20))
        print("# back to back, 200 rounds (warm):")
        print(measure(table, 0.0, 200))
        print("# the power, each way alone after a 0.5 s gap, 20 rounds (cold):")
        for name, call in power_variants(handle).items():
            print(measure({name: call}, 0.5, 20))
    finally:
        workload.kill()


if __name__ == "__main__":
    main()
