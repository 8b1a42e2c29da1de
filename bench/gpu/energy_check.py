"""NVML's total energy counter against power x time, on a real GPU under a bf16 matmul loop.

A child process runs the matmul loop for --seconds (default 60) on one GPU; this process
reads the GPU's total energy counter (nvmlDeviceGetTotalEnergyConsumption, mJ since the
driver loaded) and its power (nvmlDeviceGetPowerUsage, mW) at --hz (default 10) from a few
seconds before the loop starts to a few after it ends (the power reading is a one-second
average on recent GPUs: its lag at the ramp up and the ramp down cancels when both are
inside the span). It prints:

- the counter's increase over the span in joules, the power readings integrated over the
  same span (trapezoids), and their ratio (the goal: within 5%);
- the energy per matmul and the TFLOP per joule, from the loop's own count (a known amount
  of work, as a token count is for a serving engine);
- what one read costs: the calling thread's CPU per call (time.thread_time, the driver's
  work in this thread included) and wall time, median of --calls, for the energy counter
  and for the power reading, spaced 0.1 s apart (as an agent pays them) and back to back;
- where headroom is importable (run from the repository root), headroom's own NVML source
  (the counter read every 30 s, power integrated between) read at 1 Hz over the same span,
  against the counter.

    python bench/gpu/energy_check.py --gpu 0 > bench/results/energy_check_h200.txt

Needs nvidia-ml-py (pynvml) and torch with CUDA.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

GOAL = 0.05  # the counter and power x time agree within 5%
MATMUL_N = 8192  # square bf16 matmul: 2 N^3 FLOP each


# -- pure parts (tested without a GPU: tests/gpu/test_energy_check.py) -----------------------


def integrate(samples: Sequence[tuple[float, float]]) -> float:
    """Joules from (seconds, watts) readings: trapezoids between consecutive readings."""
    total = 0.0
    for (t0, w0), (t1, w1) in zip(samples, samples[1:]):
        total += max(0.0, t1 - t0) * 0.5 * (w0 + w1)
    return total


def counter_joules(readings_mj: Sequence[float]) -> float:
    """The counter's increase in joules over its readings; a counter that fell restarted
    (the driver reloaded), and what it counted since then is added."""
    total = 0.0
    for prev, cur in zip(readings_mj, readings_mj[1:]):
        total += cur - prev if cur >= prev else cur
    return total / 1000.0


def compare(counter_j: float, power_j: float, goal: float = GOAL) -> dict[str, Any]:
    """The two figures side by side: their ratio and whether it is within the goal."""
    ratio = power_j / counter_j if counter_j > 0 else None
    return {
        "counter_j": round(counter_j, 1),
        "power_x_time_j": round(power_j, 1),
        "ratio": None if ratio is None else round(ratio, 4),
        "within_goal": ratio is not None and abs(ratio - 1.0) <= goal,
        "goal": goal,
    }


def per_work(joules: float, matmuls: int, n: int = MATMUL_N) -> dict[str, float | None]:
    """Energy per matmul and TFLOP per joule for ``matmuls`` square n x n matmuls."""
    if matmuls <= 0 or joules <= 0:
        return {"joules_per_matmul": None, "tflop_per_joule": None}
    flop = 2.0 * n**3 * matmuls
    return {
        "joules_per_matmul": round(joules / matmuls, 4),
        "tflop_per_joule": round(flop / joules / 1e12, 4),
    }


def call_cost(
    call: Callable[[], Any],
    calls: int,
    gap_s: float = 0.0,
    cpu: Callable[[], float] = time.thread_time,
    wall: Callable[[], float] = time.perf_counter,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, float]:
    """Median CPU and wall microseconds per call, ``gap_s`` apart."""
    cpus, walls = [], []
    for _ in range(calls):
        c0, w0 = cpu(), wall()
        call()
        cpus.append((cpu() - c0) * 1e6)
        walls.append((wall() - w0) * 1e6)
        if gap_s:
            sleep(gap_s)
    return {
        "cpu_us": round(statistics.median(cpus), 1),
        "wall_us": round(statistics.median(walls), 1),
    }


def report_lines(result: dict[str, Any]) -> list[str]:
    c = result["compare"]
    lines = [
        f"GPU {result['gpu']} ({result['name']}), {result['span_s']:.1f} s span, "
        f"{result['readings']} readings at {result['hz']:g} Hz, loop {result['loop_s']:.1f} s",
        f"energy counter: {c['counter_j']:.1f} J",
        f"power x time:   {c['power_x_time_j']:.1f} J",
        f"ratio (power x time / counter): {c['ratio']}  "
        f"({'within' if c['within_goal'] else 'OUTSIDE'} {100 * c['goal']:.0f}%)",
        f"mean power over the span: {c['counter_j'] / result['span_s']:.1f} W",
    ]
    w = result.get("work") or {}
    if w.get("joules_per_matmul") is not None:
        lines.append(
            f"{result['matmuls']} bf16 {MATMUL_N}^3 matmuls: {w['joules_per_matmul']} J each, "
            f"{w['tflop_per_joule']} TFLOP/J (counter's energy over the loop)"
        )
    for name, cost in result["costs"].items():
        lines.append(f"cost {name}: {cost['cpu_us']} us CPU, {cost['wall_us']} us wall per call")
    hr = result.get("headroom")
    if hr:
        lines.append(
            f"headroom's NVML source (counter every {hr['energy_every_s']:g} s, power between, "
            f"1 Hz): {hr['joules']:.1f} J, ratio to the counter {hr['ratio']}"
        )
    return lines


# -- the workload (child process) ------------------------------------------------------------


def workload(seconds: float, gpu: int, lead: float) -> int:
    import torch

    torch.cuda.set_device(gpu)
    a = torch.randn(MATMUL_N, MATMUL_N, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(MATMUL_N, MATMUL_N, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    print(json.dumps({"ready": True}), flush=True)
    time.sleep(lead)  # the parent reads the idle GPU first: the ramp up lies inside the span
    count = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for _ in range(20):
            torch.matmul(a, b)
        count += 20
        torch.cuda.synchronize()
    print(json.dumps({"matmuls": count}), flush=True)
    return 0


# -- the check (parent) --------------------------------------------------------------------


def _headroom_source(gpu: int) -> Any:
    """headroom's NVML source on this GPU, where the repository is importable."""
    root = Path(__file__).resolve().parents[2]
    sys.path.insert(0, str(root))
    try:
        from monitor.sources.nvml import NvmlSource
    except Exception:
        return None
    return NvmlSource(indices=[gpu], energy_every_s=30.0)


def check(args: argparse.Namespace) -> dict[str, Any]:
    import pynvml as nv

    nv.nvmlInit()
    try:
        h = nv.nvmlDeviceGetHandleByIndex(args.gpu)
        name = nv.nvmlDeviceGetName(h)
        name = name.decode() if isinstance(name, bytes) else str(name)
        costs = {
            "energy counter (0.1 s apart)": call_cost(
                lambda: nv.nvmlDeviceGetTotalEnergyConsumption(h), args.calls, 0.1
            ),
            "energy counter (back to back)": call_cost(
                lambda: nv.nvmlDeviceGetTotalEnergyConsumption(h), args.calls
            ),
            "power (0.1 s apart)": call_cost(
                lambda: nv.nvmlDeviceGetPowerUsage(h), args.calls, 0.1
            ),
            "power (back to back)": call_cost(lambda: nv.nvmlDeviceGetPowerUsage(h), args.calls),
        }
        src = None if args.no_headroom else _headroom_source(args.gpu)
        child = subprocess.Popen(
            [sys.executable, __file__, "--workload", "--seconds", str(args.seconds),
             "--gpu", str(args.gpu), "--lead", str(args.lead)],
            stdout=subprocess.PIPE, text=True, env=dict(os.environ),
        )  # fmt: skip
        assert child.stdout is not None
        child.stdout.readline()  # ready: the matrices are on the GPU
        energy: list[float] = []
        power: list[tuple[float, float]] = []
        hr_first = hr_last = None
        period = 1.0 / args.hz
        t0 = time.monotonic()
        next_hr = t0
        loop_start = loop_end = None
        while True:
            now = time.monotonic()
            energy.append(float(nv.nvmlDeviceGetTotalEnergyConsumption(h)))
            power.append((now, nv.nvmlDeviceGetPowerUsage(h) / 1000.0))
            if src is not None and now >= next_hr:
                g = src.read().gpus[0]
                hr_first = g.energy_joules if hr_first is None else hr_first
                hr_last = g.energy_joules
                next_hr += 1.0
            if loop_start is None and now - t0 >= args.lead:
                loop_start = now
            if child.poll() is not None and loop_end is None:
                loop_end = now
            if loop_end is not None and now - loop_end >= args.tail:
                break
            time.sleep(max(0.0, period - (time.monotonic() - now)))
        out = json.loads((child.stdout.read() or "{}").strip().splitlines()[-1] or "{}")
        matmuls = int(out.get("matmuls", 0))
        span = power[-1][0] - power[0][0]
        counter_j = counter_joules(energy)
        result: dict[str, Any] = {
            "gpu": args.gpu,
            "name": name,
            "hz": args.hz,
            "readings": len(energy),
            "span_s": span,
            "loop_s": (loop_end or 0.0) - (loop_start or 0.0),
            "compare": compare(counter_j, integrate(power)),
            "matmuls": matmuls,
            "work": per_work(counter_j, matmuls),
            "costs": costs,
        }
        if src is not None and hr_first is not None and hr_last is not None:
            hr_j = hr_last - hr_first
            result["headroom"] = {
                "energy_every_s": 30.0,
                "joules": hr_j,
                "ratio": round(hr_j / counter_j, 4) if counter_j else None,
            }
            src.close()
        return result
    finally:
        nv.nvmlShutdown()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gpu", type=int, default=0)
    p.add_argument("--seconds", type=float, default=60.0, help="matmul loop length")
    p.add_argument("--hz", type=float, default=10.0, help="readings a second")
    p.add_argument("--calls", type=int, default=200, help="calls per cost figure")
    p.add_argument("--lead", type=float, default=3.0, help="seconds read before the loop")
    p.add_argument("--tail", type=float, default=5.0, help="seconds read after the loop")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--no-headroom", action="store_true", help="skip headroom's own source")
    p.add_argument("--workload", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.workload:
        return workload(args.seconds, args.gpu, args.lead)
    result = check(args)
    print(json.dumps(result, indent=1) if args.json else "\n".join(report_lines(result)))
    return 0 if result["compare"]["within_goal"] else 1


if __name__ == "__main__":
    sys.exit(main())
