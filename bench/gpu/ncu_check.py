"""Does GPM sampling disturb, or get disturbed by, Nsight Compute profiling the same GPU?

Runs the matmul workload four ways, 1 s GPM sampling in a separate process beside it:
(a) alone, headroom sampling; (b) under ncu, headroom sampling; (c) under ncu, no
sampling. Compares ncu's kernel metrics (b vs c) and headroom's readings (a vs b).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
WL = str(ROOT / "bench/gpu/workloads.py")
NCU_METRICS = "sm__throughput.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum"


def sample(seconds: float) -> subprocess.Popen[str]:
    code = (
        f"import json,sys;sys.path.insert(0,{str(ROOT)!r})\n"
        "from monitor.read.sampler import Sampler\nfrom monitor.sources.nvml import NvmlSource\n"
        f"s=Sampler([NvmlSource(gpm=True)],interval=1.0);s.run(duration={seconds:f})\n"
        "for x in s.snapshots():\n"
        "  g=x.gpus[0] if x.gpus else None\n"
        "  print(json.dumps({'util':g and g.util,'sm_active':g and g.sm_active,'tensor':g and g.tensor_active,'errors':[e.message for e in x.errors]}))\n"
    )
    return subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def ncu_cmd(report: Path) -> list[str]:
    ncu = shutil.which("ncu") or "/usr/local/cuda/bin/ncu"
    return [
        ncu,
        "--clock-control",
        "none",
        "--metrics",
        NCU_METRICS,
        "-k",
        "regex:gemm|Kernel|sm90",
        "-c",
        "10",
        "--csv",
        "--log-file",
        str(report),
        sys.executable,
        WL,
        "matmul",
        "--seconds",
        "6",
    ]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    out: list[str] = []
    # (a) alone with sampling
    wl = subprocess.Popen(
        [sys.executable, WL, "matmul", "--seconds", "9"], stdout=subprocess.DEVNULL
    )
    time.sleep(3)
    s = sample(5)
    out.append("(a) matmul alone, headroom GPM at 1 s:\n" + s.communicate(timeout=60)[0])
    wl.wait(60)
    # (b) under ncu with sampling
    rep_b = args.out.parent / "ncu_b.csv"
    s = sample(8)
    t0 = time.monotonic()
    nb = subprocess.run(ncu_cmd(rep_b), capture_output=True, text=True, timeout=240)
    out.append(
        f"(b) matmul under ncu ({time.monotonic() - t0:.1f} s), headroom GPM at 1 s:\n"
        + s.communicate(timeout=60)[0]
    )
    out.append(
        f"ncu rc={nb.returncode} stderr={nb.stderr[-800:]}\n"
        + (rep_b.read_text()[-3000:] if rep_b.exists() else "no report")
    )
    # (c) under ncu without sampling
    rep_c = args.out.parent / "ncu_c.csv"
    nc = subprocess.run(ncu_cmd(rep_c), capture_output=True, text=True, timeout=240)
    out.append(
        f"(c) matmul under ncu, no sampling: rc={nc.returncode} stderr={nc.stderr[-800:]}\n"
        + (rep_c.read_text()[-3000:] if rep_c.exists() else "no report")
    )
    text = "\n\n".join(out)
    args.out.write_text(text)
    print(text[-6000:])
    print(json.dumps({"done": True}))


if __name__ == "__main__":
    main()
