"""`headroom tune` against `--grid` on the simulator's virtual clock (run by hand; results
committed).

The same scenarios, grids and traffic as bench/tune_vs_grid_sim.py (128-token prompts, 32
tokens out, up to 256 streams), each run's sweep on the box's virtual clock
(tests/loadgen/virtual_tune.py: the sweep's adaptive plan and analysis, the tune's own
decision), so a path costs seconds and carries none of the shared machine's noise (one config
launched again in real time spread 3,500-5,500 tok/s). The goal: the tune's best within 5% of
the grid's best in at most a third of its runs.

    .venv/bin/python bench/tune_vs_grid_vsim.py [--out bench/results/tune_vs_grid_vsim.txt]
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "loadgen"))

from virtual_tune import tune  # noqa: E402

from bench.tune_vs_grid_sim import best_line, path_lines, row  # noqa: E402
from loadgen import tune_plan as plan  # noqa: E402
from simulator.scenarios import build  # noqa: E402

GRIDS: dict[str, dict[str, list[int]]] = {
    "seq-cap": {"max_num_seqs": [8, 16, 32, 64], "max_num_batched_tokens": [2048, 4096, 8192]},
    "kv-cap": {"num_blocks": [320, 640, 1280, 2560], "max_num_seqs": [64, 128, 256]},
}
TRAFFIC = {"prompt_tokens": 128, "prompt_jitter": 0.0, "output_tokens": 32, "output_jitter": 0.0}
SWEEP = {"most": 256, "warmup_s": 5.0, "window_s": 10.0}


def knobs_of(values: dict[str, list[int]], grid: bool) -> list[plan.KnobSpec]:
    specs = [f"{k}={','.join(map(str, v))}" if grid else f"{k}={v[0]}:{v[-1]}"
             for k, v in values.items()]  # fmt: skip
    return plan.parse_knobs(specs, grid)


def machine_s(wall: float) -> str:
    return f"({wall:.0f} s of this machine)"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "tune_vs_grid_vsim.txt")
    p.add_argument("--scenarios", default=",".join(GRIDS))
    p.add_argument("--label", default="", help="a word on the code measured, for the header")
    args = p.parse_args()
    rows = [
        "# headroom tune vs --grid on the simulator's virtual clock (bench/tune_vs_grid_vsim.py)",
        f"# {time.strftime('%Y-%m-%d %H:%M')} on {platform.node()}{args.label}; virtual clock, "
        f"steps of {SWEEP['window_s']:g} s after {SWEEP['warmup_s']:g} s warm-up, up to "
        f"{SWEEP['most']} streams, 128-token prompts, 32 tokens out",
        "",
    ]
    for scenario in args.scenarios.split(","):
        values = GRIDS[scenario]
        cfg = build(scenario, load=TRAFFIC)
        t0 = time.monotonic()
        t = tune(cfg, knobs_of(values, False), **SWEEP)
        t1 = time.monotonic()
        g = tune(cfg, knobs_of(values, True), grid=True, **SWEEP)
        t2 = time.monotonic()
        said = " x ".join(f"{k} {v}" for k, v in values.items())
        # With where the tune first came within 5% of the grid's best.
        rows += [f"{scenario} ({said}):", row("tune", t, machine_s(t1 - t0)),
                 row("grid", g, machine_s(t2 - t1)),
                 best_line(t, g, first=True)]  # fmt: skip
        rows += path_lines(t, "followed the what-if")
        rows.append("  grid: " + "; ".join(
            f"{'/'.join(str(v) for v in r['knobs'].values())}: {r.get('throughput_tok_s')} "
            f"({r.get('cause')})" for r in g["runs"]))  # fmt: skip
        rows.append("")
        print("\n".join(rows[-8:]), flush=True)
    args.out.write_text("\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
