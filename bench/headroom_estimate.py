"""The headroom figure against what a sweep then measures (run by hand; results committed).

For each box: start it, run `headroom sweep` (closed loop, doubling from 1 stream), and set
the first step's estimate (concurrency at the first limit, from a window at a quarter of the
cap or less) beside the saturation point the sweep measured.

    .venv/bin/python bench/headroom_estimate.py [--out bench/results/headroom_estimate.txt]
        [--only sim:seq-cap,sim:kv-cap,sim:compute-bound,vllm:seq-cap,vllm:kv-cap]

Boxes: the simulator's scenarios (`headroom sim --no-load`) and real vLLM's CPU build
(deploy/vllm-cpu, tiny model) with a sequence cap of 4 or a KV cache of 16 blocks.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "deploy" / "vllm-cpu"))

BOXES = {
    "sim:seq-cap": ("sim", "seq-cap", ["--input-tokens", "128", "--output-tokens", "64"]),
    "sim:kv-cap": ("sim", "kv-cap", ["--input-tokens", "512", "--output-tokens", "256"]),
    "sim:compute-bound": ("sim", "compute-bound", ["--input-tokens", "2048", "--output-tokens", "16"]),
    "vllm:seq-cap": ("vllm", ["--max-num-seqs", "4"], ["--input-tokens", "32", "--output-tokens", "200"]),
    "vllm:kv-cap": ("vllm", ["--num-gpu-blocks-override", "16", "--max-num-seqs", "64"],
                    ["--input-tokens", "32", "--output-tokens", "200"]),
}  # fmt: skip


def sweep(target: str, gpu: str | None, extra: list[str], out: Path) -> dict:
    cmd = [sys.executable, "-m", "headroom", "sweep", "--target", target,
           "--concurrency", "1,2,4,8,16,32", "--step-seconds", "8", "--warmup-seconds", "2",
           "--quiet", "--out", str(out), *extra]  # fmt: skip
    if gpu:
        cmd += ["--dcgm-exporter", gpu]
    subprocess.run(cmd, cwd=ROOT, check=False, timeout=900)
    return json.loads((out / "sweep.json").read_text())


def run_box(name: str, tmp: Path) -> dict:
    kind, what, extra = BOXES[name]
    if kind == "sim":
        from simulator import start_sim

        with start_sim(scenario=what, port=0, load=False) as sim:
            return sweep(sim.url, sim.gpu_metrics_url, extra, tmp / name.replace(":", "-"))
    import serve  # deploy/vllm-cpu/serve.py

    python = serve.ensure_venv()
    model = serve.ensure_model(python)
    server = serve.VllmServer(
        extra_args=list(what), python=python, model_dir=model, startup_timeout=420
    ).start()
    try:
        return sweep(server.url, None, extra, tmp / name.replace(":", "-"))
    finally:
        server.stop()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "headroom_estimate.txt")
    p.add_argument("--only", default=",".join(BOXES))
    args = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.only.split(","):
            t0 = time.monotonic()
            result = run_box(name, Path(tmp))
            hc = result.get("headroom_check") or {}
            sat = result["saturation"]
            first = result["steps"][0] if result["steps"] else {}
            room = first.get("headroom") or {}
            rows.append(
                f"{name:<18} first step c={first.get('concurrency')}: running "
                f"{first.get('running_mean')}, limits {room.get('limits')} -> estimate "
                f"{hc.get('estimated_concurrency')} before {hc.get('limit')}; measured "
                f"saturation {sat.get('concurrency')} ({sat.get('cause')}); estimate/measured "
                f"{hc.get('ratio')}; rate {hc.get('estimated_rate_rps')} vs "
                f"{hc.get('measured_rate_rps')} req/s  [{time.monotonic() - t0:.0f} s]"
            )
            print(rows[-1], flush=True)
    head = [
        "# headroom figure vs measured saturation (bench/headroom_estimate.py)",
        f"# {time.strftime('%Y-%m-%d %H:%M')} on {__import__('platform').node()}; "
        "closed-loop sweeps 1..32 streams, 8 s holds",
        "",
    ]
    args.out.write_text("\n".join(head + rows) + "\n")


if __name__ == "__main__":
    main()
