"""While Nsight Compute profiles, what do GPM and NVML's point util read?

If the point read shows the GPU busy while GPM reads exactly 0, headroom could tell
"counters held by a profiler" from "idle". Prints one JSON line per 0.5 s.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pynvml

ROOT = Path(__file__).resolve().parents[2]


def main() -> None:
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    bufs = [pynvml.nvmlGpmSampleAlloc(), pynvml.nvmlGpmSampleAlloc()]
    ncu = shutil.which("ncu") or "/usr/local/cuda/bin/ncu"
    cmd = [ncu, "--clock-control", "none", "--metrics", "gpu__time_duration.sum", "-c", "30",
           sys.executable, str(ROOT / "bench/gpu/workloads.py"), "matmul", "--seconds", "6"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pynvml.nvmlGpmSampleGet(h, bufs[0])
    t0 = time.monotonic()
    while proc.poll() is None and time.monotonic() - t0 < 40:
        time.sleep(0.5)
        pynvml.nvmlGpmSampleGet(h, bufs[1])
        req = pynvml.c_nvmlGpmMetricsGet_t()
        req.version = pynvml.NVML_GPM_METRICS_GET_VERSION
        req.numMetrics = 2
        req.metrics[0].metricId = pynvml.NVML_GPM_METRIC_SM_UTIL
        req.metrics[1].metricId = pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL
        req.sample1, req.sample2 = bufs[0], bufs[1]
        pynvml.nvmlGpmMetricsGet(req)
        point = pynvml.nvmlDeviceGetUtilizationRates(h).gpu
        procs = len(pynvml.nvmlDeviceGetComputeRunningProcesses(h))
        print(json.dumps({"t": round(time.monotonic() - t0, 1), "gpm_sm": req.metrics[0].value,
                          "gpm_util": req.metrics[1].value, "gpm_ret": [req.metrics[0].nvmlReturn, req.metrics[1].nvmlReturn],
                          "point_util": point, "procs": procs}), flush=True)  # fmt: skip
        bufs.reverse()
    proc.wait()


if __name__ == "__main__":
    main()
