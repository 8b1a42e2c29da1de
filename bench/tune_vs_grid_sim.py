"""`headroom tune` against `headroom tune --grid` on the simulator (run by hand; results committed).

Both launch `headroom sim` per run (real time, short steps) and sweep it adaptively; the grid
runs every combination of max_num_seqs x max_num_batched_tokens, as vLLM's auto_tune grids
its two knobs; the tune starts at the smallest values and follows the knee's cause. The goal:
the tune's best within 5% of the grid's best in at most a third of its runs.

    .venv/bin/python bench/tune_vs_grid_sim.py [--out bench/results/tune_vs_grid_sim.txt]
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# scenario: each knob's grid values (the tune goes from the first to the last).
GRIDS: dict[str, dict[str, list[int]]] = {
    "seq-cap": {"max_num_seqs": [8, 16, 32, 64], "max_num_batched_tokens": [2048, 4096, 8192]},
    "kv-cap": {"num_blocks": [320, 640, 1280, 2560], "max_num_seqs": [64, 128, 256]},
}
SWEEP = ["--step-seconds", "3", "--warmup-seconds", "1", "--sample-interval", "0.5",
         "--input-tokens", "128", "--output-tokens", "32", "--max-concurrency", "256", "--quiet"]  # fmt: skip


def tune(scenario: str, out: Path, grid: bool, values: dict[str, list[int]] | None = None) -> dict:
    values = values or GRIDS[scenario]
    launch = (f"{sys.executable} -m headroom sim --scenario {scenario} --no-load "
              "--listen 127.0.0.1:{port}")  # fmt: skip
    launch += "".join(f" --{k.replace('_', '-')} {{{k}}}" for k in values)
    knobs = [
        f"{k}={','.join(map(str, v))}" if grid else f"{k}={v[0]}:{v[-1]}" for k, v in values.items()
    ]
    cmd = [sys.executable, "-m", "headroom", "tune", "--launch", launch,
           "--target", "http://127.0.0.1:{port}",
           "--dcgm-exporter", "http://127.0.0.1:{port}/gpu/metrics",
           *[x for k in knobs for x in ("--knob", k)], *SWEEP, "--out", str(out)]  # fmt: skip
    if grid:
        cmd.append("--grid")
    subprocess.run(cmd, cwd=ROOT, check=True)
    return json.loads((out / "tune.json").read_text())


def row(name: str, t: dict, spent: str = "") -> str:
    """A tune's (or grid's) runs and best run; spent says the time it took (default: its wall)."""
    b = t["best"] or {}
    knobs = " ".join(f"{k}={v}" for k, v in (b.get("knobs") or {}).items())
    spent = spent or f"wall {t['wall_s']:>6.0f} s"
    return (f"  {name:<5} runs {len(t['runs']):>2}  {spent}  best run {b.get('run')}"
            f" ({knobs}): {b.get('throughput_tok_s')} tok/s at concurrency "
            f"{b.get('saturation_concurrency')}; stopped: {t['stopped']}")  # fmt: skip


def path_lines(t: dict, notes_label: str) -> list[str]:
    """A tune's path, its predictions against what was measured, and its runs' notes."""
    rows = ["  tune's path: " + "; ".join(
        f"run {r['index']} {r['knobs']} knee {r.get('saturation_concurrency')} "
        f"{r.get('throughput_tok_s')} tok/s {r.get('cause')}" for r in t["runs"])]  # fmt: skip
    rows.append("  predictions: " + "; ".join(
        f"{x['knob']} {x['from']}->{x['to']}"
        + "".join(f" + {a['knob']} {a['current']}->{a['to']}" for a in x.get("also") or [])
        + f" predicted {x['predicted_tok_s']} measured {x['measured_tok_s']} (x{x['ratio']})"
        for x in t["predictions"]))  # fmt: skip
    notes = [f"run {r['index']}: {r['decision']['note']}" for r in t["runs"]
             if (r.get("decision") or {}).get("note")]  # fmt: skip
    if notes:
        rows.append(f"  {notes_label}: " + "; ".join(notes))
    return rows


def best_line(t: dict, g: dict, first: bool = False) -> str:
    """The tune's best against the grid's (within 5% or not; with first, after how many of the
    tune's runs) and the tune's runs against the grid's (at most a third or not)."""
    tb = (t["best"] or {}).get("throughput_tok_s") or 0.0
    gb = (g["best"] or {}).get("throughput_tok_s") or 0.0
    ok_tok = gb and tb >= 0.95 * gb
    ok_runs = 3 * len(t["runs"]) <= len(g["runs"])
    after = ""
    if first:
        n = next((r["index"] + 1 for r in t["runs"]
                  if (r.get("throughput_tok_s") or 0.0) >= 0.95 * gb), None)  # fmt: skip
        after = f", first after {n if n else '-'} runs"
    return (f"  tune's best / grid's best {tb / gb if gb else float('nan'):.3f} "
            f"({'within' if ok_tok else 'NOT within'} 5%{after}); runs {len(t['runs'])} of "
            f"{len(g['runs'])} ({'at most' if ok_runs else 'MORE than'} a third)")  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "tune_vs_grid_sim.txt")
    p.add_argument("--scenarios", default="seq-cap")
    p.add_argument("--append", action="store_true", help="add to the results file")
    p.add_argument("--noise", metavar="SCENARIO:K=V,V K=V,V",
                   help="only launch these grid values again (repeat a value to repeat a run)")  # fmt: skip
    p.add_argument("--tune-only", metavar="GRID_BEST:GRID_RUNS",
                   help="run the tune alone, against a grid's best tok/s and run count measured "
                   "before (one scenario)")  # fmt: skip
    args = p.parse_args()
    rows = [
        "# headroom tune vs --grid on the simulator (bench/tune_vs_grid_sim.py)",
        f"# {time.strftime('%Y-%m-%d %H:%M')} on {platform.node()} (2 shared cores); real time, "
        f"steps {' '.join(SWEEP[:6])}; the grid: every combination of each scenario's values, "
        "the tune: from the first values, each bounded by the last",
        "",
    ]
    for scenario in [] if args.noise else args.scenarios.split(","):
        work = Path(tempfile.mkdtemp(prefix="tune-bench-"))
        try:
            t = tune(scenario, work / "tune", grid=False)
            if args.tune_only:
                best, _, n = args.tune_only.partition(":")
                g = {"best": {"throughput_tok_s": float(best)}, "runs": [{}] * int(n),
                     "wall_s": 0.0, "stopped": "not run: the grid measured before"}  # fmt: skip
            else:
                g = tune(scenario, work / "grid", grid=True)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        grid_said = " x ".join(f"{k} {v}" for k, v in GRIDS[scenario].items())
        rows += [f"{scenario} ({grid_said}):", row("tune", t), row("grid", g), best_line(t, g)]
        rows += path_lines(t, "past a client-limited knee")
        rows.append("  grid: " + "; ".join(
            f"{'/'.join(str(v) for v in r['knobs'].values())}: {r.get('throughput_tok_s')}"
            for r in g["runs"] if r))  # fmt: skip
        rows.append("")
        print("\n".join(rows[-8:]), flush=True)
    if args.noise:
        # The same configs launched again: how far apart two runs of one config measure.
        scenario, _, spec = args.noise.partition(":")
        values = {
            k: [int(x) for x in v.split(",")] for k, v in (kv.split("=") for kv in spec.split())
        }
        rows = rows[:2] + [""]
        work = Path(tempfile.mkdtemp(prefix="tune-bench-"))
        try:
            g = tune(scenario, work / "noise", grid=True, values=values)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        rows.append(
            f"{scenario}, the same configs again (run-to-run spread, --noise '{args.noise}'):"
        )
        rows.append("  " + "; ".join(
            f"{'/'.join(str(v) for v in r['knobs'].values())}: {r.get('throughput_tok_s')} "
            f"({r.get('cause')})" for r in g["runs"]))  # fmt: skip
        rows.append("")
        print("\n".join(rows[-3:]), flush=True)
    if args.out.exists() and args.append:
        rows = args.out.read_text().rstrip("\n").splitlines() + [""] + rows[1:]
    args.out.write_text("\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
