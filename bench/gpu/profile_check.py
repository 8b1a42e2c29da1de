"""Which code, on a GPU: the torch-profiler trace summary checked over known workloads, and
the Story-B loop's busy CPU function named in the cpu-bound verdict.

On a CUDA machine, from the repository root (about 2-3 minutes):
    python bench/gpu/profile_check.py --out "$OUT"

Part 1, trace summary: each workload runs N steps under ``torch.profiler`` (CPU and CUDA
activities), each step in ``record_function("headroom_step")``; the Chrome trace goes
through ``monitor.profiling.trace.summarise`` (what ``headroom profile`` prints), and the
summary is set beside figures measured independently: kernels per step from
``prof.key_averages()`` (device events over steps), total kernel time from the same, and
the share of a step with no kernel running from the step's wall time (``perf_counter``
around step and synchronise) less its kernel time. Expected: the 32-element add launches
100 kernels a step and the GPU idles most of it (launch-bound); the small model's step
launches its kernels eagerly with gaps, and as a CUDA graph with almost none; a bf16
matmul leaves no gap.

Part 2, Story B: ``workloads.py storyb`` (12 ms GPU then 28 ms CPU per step, the CPU in
``_cpu_burn``) with ``headroom snapshot --profile --pid PID``: the cpu-bound verdict must
name ``_cpu_burn``. py-spy must be on PATH, beside this Python, or in $HEADROOM_PYSPY
(``.cache/bin/py-spy`` is tried too: a copy of the static binary carried to the box).

Writes profile_check.txt (and the traces' summaries as JSON) under --out.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench" / "gpu"))

from workloads import _small_model, _small_step, _small_step_graph  # noqa: E402

from monitor.profiling.trace import render, summarise  # noqa: E402

WORKLOADS_PY = str(ROOT / "bench" / "gpu" / "workloads.py")


def steps() -> dict[str, tuple[Callable[[], object], int]]:
    x = torch.zeros(32, device="cuda")

    def tiny() -> None:
        for _ in range(100):
            x.add_(1.0)

    weights, h = _small_model()
    graph, _static_h = _small_step_graph(weights, h)
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    return {
        "tiny-eager": (tiny, 50),
        "smallstep-eager": (lambda: _small_step(weights, h), 50),
        "smallstep-graph": (graph.replay, 50),
        "matmul": (lambda: [a @ b for _ in range(4)], 20),
    }


def check_trace(name: str, step: Callable[[], object], n: int, out: Path) -> dict:
    from torch.profiler import ProfilerActivity, profile, record_function

    for _ in range(5):
        step()
    torch.cuda.synchronize()
    walls = []
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            t0 = time.perf_counter()
            with record_function("headroom_step"):
                step()
                torch.cuda.synchronize()
            walls.append(time.perf_counter() - t0)
    path = out / f"trace-{name}.json"
    prof.export_chrome_trace(str(path))
    summary = summarise(path)
    # Independent figures from torch's own aggregation (device-side events only).
    device = [
        e
        for e in prof.key_averages()
        if getattr(e, "device_type", None) is not None and "CUDA" in str(e.device_type)
    ]
    kernels_total = sum(e.count for e in device)
    # torch >= 2.4 names it self_device_time_total; older releases self_cuda_time_total.
    device_us = sum(
        getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0.0)
        for e in device
    )
    wall_us = statistics.median(walls) * 1e6
    ref_idle = max(0.0, 1.0 - (device_us / n) / wall_us)
    result = {
        "workload": name,
        "steps": n,
        "summary": summary.to_json(),
        "reference": {
            "kernels_per_step": kernels_total / n,
            "kernel_us_per_step": device_us / n,
            "step_wall_us_median": wall_us,
            "idle_share_from_wall": ref_idle,
        },
    }
    path.unlink(missing_ok=True)  # tens of MB each: the summary is what we keep
    return result


def story_b(out: Path) -> list[str]:
    lines = ["", "Story B: headroom snapshot --profile on workloads.py storyb"]
    spy = ROOT / ".cache" / "bin" / "py-spy"
    env = dict(os.environ)
    if "HEADROOM_PYSPY" not in env and spy.exists():
        env["HEADROOM_PYSPY"] = str(spy)
    work = subprocess.Popen(
        [sys.executable, WORKLOADS_PY, "storyb", "--seconds", "40"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        time.sleep(10)  # calibration, then steady steps
        proc = subprocess.run(
            [sys.executable, "-m", "headroom", "snapshot", "--pid", str(work.pid),
             "--window", "8", "--interval", "0.5", "--profile", "--json"],
            capture_output=True, text=True, timeout=120, env=env, cwd=ROOT,
        )  # fmt: skip
    finally:
        work.kill()
        work.wait()
    if proc.returncode != 0 or not proc.stdout.startswith("{"):
        lines.append(f"  FAILED: exit {proc.returncode}: {proc.stderr.strip()[-400:]}")
        return lines
    report = json.loads(proc.stdout)
    (out / "storyb_snapshot.json").write_text(json.dumps(report, indent=2))
    cpu = [v for v in report["verdicts"] if v["cause"] == "cpu-bound"]
    prof = report.get("cpu_profile") or {}
    lines.append(f"  verdicts: {[(v['cause'], v['confidence']) for v in report['verdicts']]}")
    lines.append(f"  profile: thread {prof.get('thread')!r}, {prof.get('samples')} samples")
    for f in (prof.get("functions") or [])[:5]:
        lines.append(
            f"    {100 * f['self_share']:5.1f}% self {100 * f['total_share']:5.1f}% total  "
            f"{f['function']} ({f['file']}:{f['line']})"
        )
    if cpu:
        lines.append(f"  cpu-bound summary: {cpu[0]['summary']}")
        lines.append(f"  cpu-bound fix: {cpu[0]['fix']}")
        ok = "_cpu_burn" in cpu[0]["summary"]
        lines.append(f"  _cpu_burn named in the cpu-bound evidence: {'YES' if ok else 'NO'}")
    else:
        lines.append("  NO cpu-bound verdict in this window")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    ap.add_argument("--skip-storyb", action="store_true")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    lines = [
        "which code on a GPU: trace summary vs torch's own figures, and Story B's CPU function",
        f"date: {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC; "
        f"GPU: {torch.cuda.get_device_name(0)}; torch {torch.__version__}",
    ]
    results = []
    for name, (step, n) in steps().items():
        r = check_trace(name, step, n, out)
        results.append(r)
        s, ref = r["summary"], r["reference"]
        lines += ["", f"[{name}] {n} steps"]
        lines.append(
            f"  kernels/step: summary {s['kernels_per_step']} vs torch {ref['kernels_per_step']:.1f}"
        )
        lines.append(
            f"  no kernel running: summary {s['idle_share']:.3f} of a step vs "
            f"1 - kernel time / step wall {ref['idle_share_from_wall']:.3f}"
        )
        lines.append(
            f"  median kernel {s['median_kernel_us']} us; step {s['step_median_us']} us "
            f"(wall {ref['step_wall_us_median']:.0f} us); kernel us/step torch "
            f"{ref['kernel_us_per_step']:.1f}"
        )
        lines += ["  " + ln for ln in render(summarise_from_json(s)).splitlines()[1:]]
    (out / "profile_check.json").write_text(json.dumps(results, indent=2))
    if not args.skip_storyb:
        lines += story_b(out)
    text = "\n".join(lines) + "\n"
    (out / "profile_check.txt").write_text(text)
    print(text)
    return 0


def summarise_from_json(s: dict):  # type: ignore[no-untyped-def]
    from monitor.profiling.trace import OpTime, TraceSummary

    # to_json's keys are the fields' names; top and notes come back as tuples.
    top = tuple(OpTime(**o) for o in s["top"])
    return TraceSummary(**{**s, "top": top, "notes": tuple(s["notes"])})


if __name__ == "__main__":
    sys.exit(main())
