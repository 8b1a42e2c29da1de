"""What reading a GPU once a second costs a whole process, part by part.

What the driver's answers cost, each group of calls alone, against headroom's NVML
source reading the same (as the agent builds it, and with GPM's duty cycle every tick,
as bench/agent_process_cost.py's "alone" row runs it). Each variant
runs as its own process, all side by side for ``--seconds`` while the bf16 matmul loop
runs; CPU is the process's utime+stime after start-up, with each thread's share (a
driver or library thread would show there), user and system apart.

    python bench/gpu/nvml_floor.py --seconds 120 > bench/results/nvml_floor_h200.txt
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

VARIANTS = {
    "python sleep loop": "",
    "nvmlInit, no calls": "init",
    "point fields (memory, power, clock, reasons, temperature, util)": "init point",
    "GPM sample + 10 metrics": "init gpm",
    "GPM sample + 10 metrics + duty cycle each 5 s": "init gpm util5",
    "process lists each 5 s": "init procs5",
    "all of the above together (the source's calls, bare)": "init point gpm util5 procs5",
    "NvmlSource as the agent builds it (duty cycle, processes each 5 s)": "source",
    "NvmlSource(gpm=True): duty cycle every tick": "source util1",
}


def loop(parts: set[str]) -> None:
    """One variant: its reads once a second, forever (the harness kills it)."""
    read = None
    if "source" in parts:
        from monitor.sources.nvml import NvmlSource

        every = 0.0 if "util1" in parts else 5.0
        read = NvmlSource(gpm=True, util_every_s=every, processes_every_s=every).read
    elif "init" in parts:
        import pynvml as nv

        # The ten metrics headroom's source reads beside the duty cycle, asked as it asks.
        from bench.gpu.nvml_call_cost import GPM_METRICS, gpm_request

        nv.nvmlInit()
        h = nv.nvmlDeviceGetHandleByIndex(0)
        bufs = [nv.nvmlGpmSampleAlloc() for _ in range(3)]
        nv.nvmlGpmSampleGet(h, bufs[0])
        state = {"prev": bufs[0], "base": bufs[0], "n": 0}

        ten = gpm_request(GPM_METRICS, bufs[0], bufs[0])
        util = gpm_request(("GRAPHICS_UTIL",), bufs[0], bufs[0])

        def read() -> None:
            state["n"] += 1
            if "point" in parts:
                nv.nvmlDeviceGetMemoryInfo(h)
                nv.nvmlDeviceGetPowerUsage(h)
                nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)
                nv.nvmlDeviceGetCurrentClocksEventReasons(h)
                nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)
                nv.nvmlDeviceGetUtilizationRates(h)
            if "gpm" in parts:
                prev, base = state["prev"], state["base"]
                cur = next(b for b in bufs if b is not prev and b is not base)
                nv.nvmlGpmSampleGet(h, cur)
                ten.sample1, ten.sample2 = prev, cur
                nv.nvmlGpmMetricsGet(ten)
                if "util5" in parts and state["n"] % 5 == 0:
                    util.sample1, util.sample2 = base, cur
                    nv.nvmlGpmMetricsGet(util)
                    state["base"] = cur
                elif "util5" not in parts:
                    state["base"] = cur
                state["prev"] = cur
            if "procs5" in parts and state["n"] % 5 == 0:
                nv.nvmlDeviceGetComputeRunningProcesses(h)
                nv.nvmlDeviceGetGraphicsRunningProcesses(h)

    deadline = time.monotonic()
    while True:
        if read is not None:
            read()
        deadline += 1.0
        time.sleep(max(0.0, deadline - time.monotonic()))


def threads_of(p: psutil.Process) -> dict[int, tuple[float, float]]:
    return {t.id: (t.user_time, t.system_time) for t in p.threads()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--warmup", type=float, default=10.0)
    ap.add_argument("--variant", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.variant is not None:
        loop(set(args.variant.split()))
        return
    work = subprocess.Popen(
        [sys.executable, str(ROOT / "bench/gpu/workloads.py"), "matmul", "--seconds",
         str(args.seconds + args.warmup + 30)],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    procs = {
        name: subprocess.Popen([sys.executable, __file__, "--variant", parts])
        for name, parts in VARIANTS.items()
    }
    try:
        time.sleep(args.warmup)
        ps = {name: psutil.Process(p.pid) for name, p in procs.items()}
        before = {name: (p.cpu_times(), threads_of(p)) for name, p in ps.items()}
        t0 = time.monotonic()
        time.sleep(args.seconds)
        wall = time.monotonic() - t0
        after = {name: (p.cpu_times(), threads_of(p)) for name, p in ps.items()}
    finally:
        for p in procs.values():
            p.kill()
        work.kill()
    print(f"# {len(VARIANTS)} processes side by side for {wall:.0f} s, a bf16 matmul loop running")
    print(f"{'variant':66s} {'% core':>7s} {'user':>6s} {'sys':>6s}  threads (ms/s each)")
    for name in VARIANTS:
        (c0, th0), (c1, th1) = before[name], after[name]
        user, system = (c1.user - c0.user) / wall, (c1.system - c0.system) / wall
        each = []
        for tid, (u, s) in th1.items():
            u0, s0 = th0.get(tid, (0.0, 0.0))
            each.append((u + s - u0 - s0) / wall * 1e3)
        shown = " ".join(f"{v:.2f}" for v in sorted(each, reverse=True))
        print(f"{name:66s} {100 * (user + system):6.3f}% {user * 1e3:6.2f} {system * 1e3:6.2f}  "
              f"{len(each)}: {shown}")  # fmt: skip
    print("# user, sys: ms of CPU a second; threads: each thread's user+sys, ms a second")


if __name__ == "__main__":
    main()
