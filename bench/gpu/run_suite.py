"""Run each GPU workload with headroom sampling beside it; record snapshots and verdicts to JSONL.

On a CUDA machine, from the repository root:
    python bench/gpu/run_suite.py --out OUTDIR [--only matmul,tiny] [--phase record,snapshot,cost,ncu]

Phases:
- record: for each workload, NVML+GPM and the host source (watching the workload's
  process and threads) at 1 s and at 100 ms; one JSONL file per workload and interval.
- snapshot: `headroom snapshot --json` while the matmul and the tiny-kernel loops run.
- cost: the agent's CPU per tick (NVML only / with GPM / full with host and one vLLM
  endpoint, at 1 s and 100 ms) beside nvitop-exporter sampling the same GPU.
- ncu: GPM readings with and without Nsight Compute profiling the same workload.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
WORKLOADS_PY = str(ROOT / "bench" / "gpu" / "workloads.py")

ORDER = [
    "idle", "matmul", "copy", "tiny", "smallstep", "smallstep-graph",
    "storyb", "storyb-overlap", "decode-b1", "decode-b64", "h2d",
]  # fmt: skip
WARMUP_S = {
    "storyb": 6.0,
    "storyb-overlap": 6.0,
    "decode-b1": 6.0,
    "decode-b64": 8.0,
    "smallstep-graph": 6.0,
    "h2d": 6.0,  # pinning 256 MiB of host memory takes ~2 s before the first copy
}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def start_workload(name: str, seconds: float) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, WORKLOADS_PY, name, "--seconds", str(seconds)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def finish(proc: subprocess.Popen[str]) -> dict[str, object]:
    try:
        out, _ = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
    for line in reversed(out.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return {"error": out[-2000:]}


def record(name: str, pid: int, interval: float, seconds: float, path: Path) -> dict[str, object]:
    from recorded import record_report

    from monitor.sources.host import HostSource
    from monitor.sources.nvml import NvmlSource

    report = record_report([NvmlSource(gpm=True), HostSource(pids=[pid])], path, seconds, interval)
    g = (report.get("gpus") or [{}])[0]
    host = report.get("host") or {}
    verdicts = report.get("verdicts") or []
    return {
        "util": g.get("util"),
        "sm_active": g.get("sm_active"),
        "sm_occupancy": g.get("sm_occupancy"),
        "tensor_active": g.get("tensor_active"),
        "dram_active": g.get("dram_active"),
        "busiest_thread": host.get("busiest_thread"),
        "verdicts": [(v["cause"], v["scope"], v["confidence"]) for v in verdicts],
    }


def phase_record(out: Path, only: list[str]) -> None:
    rec_dir = out / "recordings"
    rec_dir.mkdir(parents=True, exist_ok=True)
    summary = []
    for name in only:
        warm = WARMUP_S.get(name, 4.0)
        proc = start_workload(name, warm + 10.0 + 3.0 + 2.0)
        time.sleep(warm)
        try:
            r1 = record(name, proc.pid, 1.0, 9.0, rec_dir / f"{name}-1s.jsonl")
            r2 = record(name, proc.pid, 0.1, 2.5, rec_dir / f"{name}-100ms.jsonl")
        except Exception as exc:  # keep going: one broken workload must not cost the device run
            log(f"{name}: sampling failed: {exc!r}")
            r1 = r2 = {"error": repr(exc)}
        result = finish(proc)
        summary.append(
            {"workload": name, "window_1s": r1, "window_100ms": r2, "workload_result": result}
        )
        log(f"{name}: 1s {json.dumps(r1)}")
        log(f"{name}: 100ms {json.dumps(r2)}")
        log(f"{name}: workload {json.dumps(result)}")
    (out / "record_summary.json").write_text(json.dumps(summary, indent=1))


def phase_snapshot(out: Path) -> None:
    for name in ("matmul", "tiny"):
        proc = start_workload(name, 14.0)
        time.sleep(5.0)
        res = subprocess.run(
            [
                sys.executable,
                "-m",
                "headroom",
                "snapshot",
                "--json",
                "--window",
                "4",
                "--pid",
                str(proc.pid),
            ],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=60,
        )
        finish(proc)
        (out / f"snapshot-{name}.json").write_text(res.stdout)
        log(f"snapshot during {name}: rc={res.returncode} stderr={res.stderr.strip()[-500:]}")
        try:
            g = json.loads(res.stdout)["gpus"][0]
            log(
                f"  util={g['util']} sm_active={g['sm_active']} tensor={g['tensor_active']} dram={g['dram_active']}"
            )
        except Exception as exc:
            log(f"  unreadable: {exc!r}")


def _run_check(label: str, script: str, out_file: Path, timeout: float, tail: int) -> None:
    """Run a bench/gpu script that writes its result to ``out_file``; log its output's tail."""
    res = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "gpu" / script), "--out", str(out_file)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=timeout,
    )
    log(f"{label}: rc={res.returncode}\n{res.stdout[-tail:]}\n{res.stderr[-2000:]}")


def phase_cost(out: Path) -> None:
    _run_check("cost", "agent_cost.py", out / "agent_cost.txt", timeout=400, tail=4000)


def phase_ncu(out: Path) -> None:
    _run_check("ncu", "ncu_check.py", out / "ncu_check.txt", timeout=300, tail=3000)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--only", default=",".join(ORDER))
    p.add_argument("--phase", default="record,snapshot,cost,ncu")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    phases = args.phase.split(",")
    if "record" in phases:
        phase_record(args.out, args.only.split(","))
    if "snapshot" in phases:
        phase_snapshot(args.out)
    if "cost" in phases:
        phase_cost(args.out)
    if "ncu" in phases:
        phase_ncu(args.out)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
