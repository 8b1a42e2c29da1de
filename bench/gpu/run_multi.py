"""Several GPUs: record each multi-GPU workload with headroom beside it, then the agent's cost.

On a machine with two or more GPUs, from the repository root:
    python bench/gpu/run_multi.py --out OUTDIR [--only allreduce,compute,tp-matmul]
                                  [--phase record,cost]

Phases:
- record: for each workload of multi_workloads.py (one process per GPU), NVML+GPM on
  every GPU and the host source watching the ranks, at 1 s (10 s) and at 100 ms (3 s);
  one JSONL recording per workload and interval under OUTDIR/recordings, and one summary
  line per workload: per GPU util, SM active, tensor, NVLink tx/rx, and the top verdicts.
- cost: while the compute loop keeps every GPU busy, the agent's CPU per tick and per GPU
  (NVML+GPM on all GPUs at 1 s and at 100 ms, and the full agent at 1 s), each beside
  nvitop-exporter sampling the same GPUs at the same interval.

Any number of GPUs from 2; the whole run takes about 3 minutes. One failing workload or
configuration is logged and skipped, never the end of the run.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench" / "gpu"))
MULTI_PY = str(ROOT / "bench" / "gpu" / "multi_workloads.py")
AGENT_COST_PY = str(ROOT / "bench" / "gpu" / "agent_cost.py")

ORDER = ["allreduce", "compute", "tp-matmul"]
WARMUP_S = 3.0  # before looking at the GPUs at all
SETTLE_S = 2.0  # once every GPU is busy: first iterations, tp-matmul's own timing
RECORD_1S = 10.0
RECORD_100MS = 3.0
# The agent's configurations measured on every GPU (agent_cost.CONFIGS), and the
# interval nvitop-exporter runs at beside each: it refuses anything under 0.25 s.
COST_CONFIGS = {"gpm-all-1s": 1.0, "gpm-all-100ms": 0.25, "agent-all-1s": 1.0}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def gpu_count() -> int:
    import pynvml

    pynvml.nvmlInit()
    try:
        return int(pynvml.nvmlDeviceGetCount())
    finally:
        pynvml.nvmlShutdown()


def wait_busy(gpus: int, timeout: float = 90.0, busy: float = 50.0) -> float:
    """Seconds until every GPU's utilisation reads over `busy`%: spawn, CUDA and NCCL
    start-up take 5-12 s and vary, and a recording that begins before the ranks reach
    the GPUs holds start-up, not the workload."""
    import pynvml

    t0 = time.monotonic()
    pynvml.nvmlInit()
    try:
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(gpus)]
        while time.monotonic() - t0 < timeout:
            if all(pynvml.nvmlDeviceGetUtilizationRates(h).gpu > busy for h in handles):
                time.sleep(SETTLE_S)
                return time.monotonic() - t0
            time.sleep(0.5)
    finally:
        pynvml.nvmlShutdown()
    raise RuntimeError(f"the GPUs were not busy {timeout:g} s after the workload started")


def start_workload(name: str, seconds: float, gpus: int) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, MULTI_PY, name, "--seconds", str(seconds), "--gpus", str(gpus)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,  # its own process group: the ranks end with it
    )


def stop(proc: subprocess.Popen[str], sig: int = signal.SIGTERM) -> None:
    """Signal the launcher's process group (the launcher and its ranks), nothing else."""
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass


def rank_pids(proc: subprocess.Popen[str]) -> list[int]:
    """The launcher and every process under it (the ranks, spawn's helpers)."""
    import psutil

    try:
        parent = psutil.Process(proc.pid)
        return [proc.pid] + [c.pid for c in parent.children(recursive=True)]
    except psutil.Error:
        return [proc.pid]


def finish(proc: subprocess.Popen[str], timeout: float = 90.0) -> list[dict[str, Any]]:
    """Each rank's JSON line; the tail of the output when there is none."""
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        stop(proc, signal.SIGKILL)
        out, _ = proc.communicate()
    ranks = []
    decoder = json.JSONDecoder()
    for line in out.splitlines():
        # Older launchers' ranks could print two objects on one line: read them all.
        pos = line.find("{")
        while pos >= 0:
            try:
                obj, end = decoder.raw_decode(line, pos)
            except ValueError:
                break
            if isinstance(obj, dict):
                ranks.append(obj)
            pos = line.find("{", end)
    if not ranks:
        return [{"error": out[-3000:], "returncode": proc.returncode}]
    return ranks


def record(
    name: str, pids: list[int], interval: float, seconds: float, path: Path
) -> dict[str, Any]:
    from recorded import record_report, window_s

    from monitor.sources.host import HostSource
    from monitor.sources.nvml import NvmlSource

    header = {"workload": name, "interval_s": interval, "window_s": window_s(interval)}
    sources = [NvmlSource(gpm=True), HostSource(pids=pids)]
    report = record_report(sources, path, seconds, interval, header)

    def r(v: Any) -> Any:
        return round(v, 3) if isinstance(v, float) else v

    def gb(v: Any) -> Any:
        return None if v is None else round(v / 1e9, 2)

    return {
        "gpus": [
            {
                "index": g.get("index"),
                "util": r(g.get("util")),
                "sm_active": r(g.get("sm_active")),
                "tensor_active": r(g.get("tensor_active")),
                "dram_active": r(g.get("dram_active")),
                "nvlink_tx_gb_s": gb(g.get("nvlink_tx_bytes_per_s")),
                "nvlink_rx_gb_s": gb(g.get("nvlink_rx_bytes_per_s")),
                "pcie_tx_gb_s": gb(g.get("pcie_tx_bytes_per_s")),
                "pcie_rx_gb_s": gb(g.get("pcie_rx_bytes_per_s")),
            }
            for g in report.get("gpus") or []
        ],
        "verdicts": [
            (v["cause"], v["scope"], v["confidence"]) for v in (report.get("verdicts") or [])[:4]
        ],
    }


def phase_record(out: Path, only: list[str], gpus: int) -> None:
    rec_dir = out / "recordings"
    rec_dir.mkdir(parents=True, exist_ok=True)
    summary = []
    for name in only:
        log(f"{name}: starting on {gpus} GPUs")
        # The ranks time their loop from its first iteration, after start-up.
        proc = start_workload(name, SETTLE_S + RECORD_1S + RECORD_100MS + 8.0, gpus)
        r1: dict[str, Any] = {}
        r2: dict[str, Any] = {}
        try:
            time.sleep(WARMUP_S)
            if proc.poll() is not None:
                raise RuntimeError(f"workload exited early with {proc.returncode}")
            log(f"{name}: every GPU busy after {WARMUP_S + wait_busy(gpus):.1f} s")
            pids = rank_pids(proc)
            log(f"{name}: watching pids {pids}")
            r1 = record(name, pids, 1.0, RECORD_1S, rec_dir / f"{name}-1s.jsonl")
            log(f"{name}: 1s {json.dumps(r1)}")
            r2 = record(name, pids, 0.1, RECORD_100MS, rec_dir / f"{name}-100ms.jsonl")
            log(f"{name}: 100ms {json.dumps(r2)}")
        except Exception as exc:  # one broken workload must not cost the device run
            log(f"{name}: sampling failed: {exc!r}")
            r1 = r1 or {"error": repr(exc)}
            r2 = r2 or {"error": repr(exc)}
        ranks = finish(proc)
        log(f"{name}: ranks {json.dumps(ranks)}")
        summary.append({"workload": name, "window_1s": r1, "window_100ms": r2, "ranks": ranks})
    (out / "record_summary.json").write_text(json.dumps(summary, indent=1))


def cost_one(config: str, pid: int) -> dict[str, Any]:
    res = subprocess.run(
        [sys.executable, AGENT_COST_PY, "--one", config, "--pid", str(pid)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    try:
        return json.loads(res.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"config": config, "error": (res.stderr or res.stdout)[-1500:]}


def phase_cost(out: Path, gpus: int, configs: list[str]) -> None:
    from agent_cost import nvitop_beside

    proc = start_workload("compute", 150.0, gpus)
    time.sleep(WARMUP_S)
    wait_busy(gpus)
    rows: list[dict[str, Any]] = []
    try:
        for config in configs:
            interval = COST_CONFIGS[config]
            log(f"cost: {config} beside nvitop-exporter at {interval:g} s (its shortest: 0.25 s)")
            holder: dict[str, Any] = {}

            def beside(h: dict[str, Any] = holder, iv: float = interval) -> None:
                try:
                    h.update(nvitop_beside(12.0 if iv < 1 else 18.0, iv))
                except Exception as exc:
                    h.update({"config": f"nvitop-exporter-{iv:g}s", "error": repr(exc)})

            th = threading.Thread(target=beside)
            th.start()
            rows.append(cost_one(config, proc.pid))
            th.join()
            rows.append(holder)
            log(f"cost: {json.dumps(rows[-2])}")
            log(f"cost: {json.dumps(rows[-1])}")
    finally:
        stop(proc)
        finish(proc, timeout=30)
    lines = [
        f"# headroom agent cost on {gpus} real GPUs ({time.strftime('%Y-%m-%d')}), "
        "compute loop on every GPU; nvitop-exporter beside each, same interval",
        f"# host: {os.cpu_count()} CPUs; CPU per tick = process CPU / ticks; per GPU = that / GPUs",
        f"{'config':<28} {'gpus':>4} {'ticks':>6} {'ms CPU/tick':>12} {'ms/tick/GPU':>12} "
        f"{'% of a core':>12}",
    ]
    for r in rows:
        if "error" in r or "cpu_ms_per_tick" not in r:
            lines.append(f"{r.get('config', '?'):<28} ERROR {str(r.get('error'))[-300:]!r}")
            continue
        n = int(r.get("gpus") or gpus)
        lines.append(
            f"{r['config']:<28} {n:>4} {r.get('ticks', '-')!s:>6} {r['cpu_ms_per_tick']:>12.3f} "
            f"{r['cpu_ms_per_tick'] / n:>12.3f} {100 * r['core_share']:>11.3f}%"
        )
    text = "\n".join(lines) + "\n"
    print(text, flush=True)
    (out / "agent_cost_multi.txt").write_text(text + "\n" + json.dumps(rows, indent=1) + "\n")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--only", default=",".join(ORDER))
    p.add_argument("--phase", default="record,cost")
    p.add_argument("--gpus", type=int, default=0, help="0: every GPU NVML sees")
    p.add_argument("--configs", default=",".join(COST_CONFIGS), help="cost phase: which ones")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    gpus = args.gpus or gpu_count()
    if gpus < 2:
        raise SystemExit(f"run_multi: needs at least 2 GPUs, found {gpus}")
    t0 = time.monotonic()
    phases = args.phase.split(",")
    if "record" in phases:
        phase_record(args.out, args.only.split(","), gpus)
    if "cost" in phases:
        try:
            phase_cost(args.out, gpus, args.configs.split(","))
        except Exception as exc:
            log(f"cost: failed: {exc!r}")
    log(f"done in {time.monotonic() - t0:.0f} s")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
