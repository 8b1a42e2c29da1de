"""Per-process GPU view on a real GPU: do the workloads' processes appear, with their memory
and SM share, and is the engine (``--pid``) marked?

Starts three workloads on GPU 0 (an "engine" matmul, a second matmul that contends, an idle
process that only holds memory), then reads the process lists through NvmlSource three
times (the driver's raw per-process samples printed beside them), and finally runs
``python -m headroom snapshot --json --pid ENGINE`` and keeps its GPU processes and
verdicts. Writes everything under $OUT (or ./out).

    python bench/gpu/processes_check.py --seconds 60
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from monitor.sources.nvml import NvmlSource

HERE = Path(__file__).resolve().parent


def start(name: str, seconds: float) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(HERE / "workloads.py"), name, "--seconds", str(seconds)],
        stdout=subprocess.PIPE,
        text=True,
    )


def wait_listed(src: NvmlSource, pids: set[int], timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        g = src.read().gpus[0]
        if pids <= {p.pid for p in g.processes or ()}:
            return
        time.sleep(1.0)
    raise SystemExit(f"workload processes {sorted(pids)} never appeared in NVML's list")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=60.0)
    args = ap.parse_args()
    out = Path(os.environ.get("OUT", "out"))
    out.mkdir(parents=True, exist_ok=True)
    engine = start("matmul", args.seconds)
    rival = start("matmul", args.seconds)
    holder = start("idle", args.seconds)
    pids = {engine.pid, rival.pid, holder.pid}
    result: dict[str, Any] = {"engine_pid": engine.pid, "rival_pid": rival.pid,
                              "idle_pid": holder.pid, "reads": []}  # fmt: skip
    src = NvmlSource(indices=[0], processes_every_s=1.0)
    try:
        wait_listed(src, pids)
        nv = src._nvml  # the raw per-process samples, to see what the driver gives
        handle = nv.nvmlDeviceGetHandleByIndex(0)
        for _ in range(3):
            time.sleep(2.0)
            t0 = time.perf_counter()
            g = src.read().gpus[0]
            read_ms = (time.perf_counter() - t0) * 1e3
            try:
                since = int(time.time() * 1e6) - 2_000_000
                raw = [
                    {"pid": s.pid, "ts": s.timeStamp, "sm": s.smUtil, "mem": s.memUtil}
                    for s in nv.nvmlDeviceGetProcessUtilization(handle, since)
                ]
            except nv.NVMLError as exc:
                raw = [{"error": str(exc)}]
            result["reads"].append(
                {
                    "read_ms_with_processes": round(read_ms, 2),
                    "util": g.util,
                    "sm_active": g.sm_active,
                    "processes": [
                        {
                            k: getattr(p, k)
                            for k in (
                                "pid",
                                "memory_bytes",
                                "sm_share",
                                "mem_share",
                                "user",
                                "command",
                                "container",
                                "visible",
                            )
                        }  # fmt: skip
                        for p in g.processes or ()
                        if p.pid in pids
                    ],
                    "raw_samples_last_2s": [r for r in raw if r.get("pid") in pids or "error" in r],
                }
            )
        # The cost of one process read alone (lists, samples, lookups of known PIDs).
        dev = src._devices[0]
        costs = []
        for _ in range(20):
            dev.procs_due = 0.0
            t0 = time.perf_counter()
            src._read_processes(dev)
            costs.append((time.perf_counter() - t0) * 1e3)
        result["process_read_ms"] = {"min": round(min(costs), 3),
                                     "median": round(sorted(costs)[10], 3)}  # fmt: skip
    finally:
        src.close()
    snap = subprocess.run(
        [sys.executable, "-m", "headroom", "snapshot", "--json", "--window", "6",
         "--pid", str(engine.pid)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    (out / "snapshot.json").write_text(snap.stdout)
    (out / "snapshot.stderr").write_text(snap.stderr)
    try:
        report = json.loads(snap.stdout)
        result["snapshot"] = {
            "gpu0_processes": report["gpus"][0]["processes"],
            "verdicts": [
                {k: v[k] for k in ("cause", "scope", "summary", "evidence")}
                for v in report["verdicts"]
            ],
            "notes": report["notes"],
        }
    except (ValueError, KeyError, IndexError) as exc:
        result["snapshot_error"] = f"{exc}: {snap.stderr[-2000:]}"
    text = subprocess.run(
        [sys.executable, "-m", "headroom", "snapshot", "--window", "3", "--pid", str(engine.pid)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    (out / "snapshot.txt").write_text(text.stdout + text.stderr)
    for p in (engine, rival, holder):
        p.terminate()
    (out / "processes_check.json").write_text(json.dumps(result, indent=1, default=str))
    print(json.dumps(result, indent=1, default=str)[:6000])


if __name__ == "__main__":
    main()
