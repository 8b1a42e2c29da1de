"""The what-if against what the simulator then does (run by hand; results committed).

For each case: run the simulated box at a config where one cap binds, under a load past it,
for one window (on the box's virtual clock, read through headroom's own parsers:
tests/diagnosis/virtual_box.py); take headroom's what-if from that window; relaunch the box
with the proposed value (and, for the second what-if, with both changes); sweep it on
virtual time (doubling from one stream, then bisecting the knee, as `headroom sweep` does);
set the predicted throughput and concurrency at the new limit, and the limit named, beside
what the sweep measured at its knee and the cause headroom names past it.

    .venv/bin/python bench/whatif_sim.py [--out bench/results/whatif_sim.txt] [--only NAME,...]
"""

from __future__ import annotations

import argparse
import dataclasses
import platform
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "diagnosis"))

from virtual_box import blocking, closed_loop, step_at, sweep_knee  # noqa: E402

from monitor.diagnosis import Caps, diagnose  # noqa: E402
from monitor.window.scopes import engine_scope  # noqa: E402
from simulator.config import SimConfig  # noqa: E402
from simulator.scenarios import build  # noqa: E402

# seq-cap's engine with a KV cache for ~13 sequences: the cap that binds after max_num_seqs.
KV_BEHIND: dict[str, Any] = {"num_blocks": 480, "max_model_len": 1024}
# name: (scenario, engine overrides, load of the window the what-if is taken from, summary)
CASES: dict[str, tuple[str, dict[str, Any], int, str]] = {
    "seq-cap": ("seq-cap", {}, 32, "max_num_seqs 8, KV and GPU with room"),
    "seq-cap>kv": ("seq-cap", KV_BEHIND, 32, "max_num_seqs 8, KV for ~13 behind it"),
    "kv-cap": ("kv-cap", {}, 24, "320 KV blocks, max_num_seqs 256"),
    "kv-cap>seq": ("kv-cap", {"max_num_seqs": 8}, 24, "320 KV blocks, max_num_seqs 8 behind"),
    "kv-cap(gmu)": (
        "kv-cap",
        {"num_blocks": 0, "gpu_memory_utilization": 0.23},
        24,
        "KV from --gpu-memory-utilization 0.23 (~700 blocks)",
    ),
    "token-cap": ("token-cap", {}, 8, "max_num_batched_tokens 128, 2,000-token prompts"),
    "token-cap>seq": ("token-cap", {"max_num_seqs": 4}, 8, "budget 128, max_num_seqs 4 behind"),
    "seq-cap@light": ("seq-cap", KV_BEHIND, 3, "as seq-cap>kv, window at 3 streams"),
}

# The simulator's setting each knob names.
SIM_FIELD = {
    "max_num_seqs": "max_num_seqs",
    "num_gpu_blocks": "num_blocks",
    "max_num_batched_tokens": "max_num_batched_tokens",
    "gpu_memory_utilization": "gpu_memory_utilization",
}
# A cause past the knee, as the what-if names the limit.
CAUSE_LIMIT = {"compute-bound": "compute", "memory-bound": "bandwidth", "cpu-bound": "cpu"}
GOAL = (0.8, 1.25)


def caps_of(cfg: SimConfig) -> Caps:
    """What the user passes (or the engine's /server_info reports): the two scheduler caps."""
    return Caps(
        max_num_seqs=cfg.engine.max_num_seqs,
        max_num_batched_tokens=cfg.engine.max_num_batched_tokens,
    )


def whatif_of(cfg: SimConfig, load: int) -> tuple[list[dict[str, Any]], str, float]:
    w = closed_loop(cfg, load, warmup_s=60, window_s=40)
    e = w.engines[0]
    d = diagnose(w, caps=caps_of(cfg))
    a = d.analyses[engine_scope(e)]
    return list(a["whatif"]), d.verdicts[0].cause, e.generation_tokens_per_s or 0.0


def measured_limit(cfg: SimConfig, knee: int) -> tuple[str, dict[str, float], str]:
    """What held requests back past the knee (twice its load), from the simulated engine's
    own state, and what headroom's diagnosis names there."""
    load = max(2 * knee, knee + 2)
    truth = blocking(cfg, load)
    top = diagnose(step_at(cfg, load)[4], caps=caps_of(cfg)).verdicts[0].cause
    return next(iter(truth)), truth, CAUSE_LIMIT.get(top, top)


def relaunch(cfg: SimConfig, moves: list[dict[str, Any]]) -> SimConfig:
    changes = {}
    for w in moves:
        field = SIM_FIELD.get(w["knob"])
        if field is None:
            raise SystemExit(f"the simulator has no setting for {w['knob']}")
        changes[field] = w["proposed"]
    engine = dataclasses.replace(cfg.engine, **changes)
    return dataclasses.replace(cfg, engine=engine)


def run_case(name: str) -> list[str]:
    scenario, engine, load, summary = CASES[name]
    cfg = build(scenario, engine=engine)
    t0 = time.monotonic()
    whatif, cause, tok = whatif_of(cfg, load)
    rows = [f"{name}: {summary}; window at {load} streams: {cause}, {tok:.0f} tok/s"]
    if not whatif:
        return rows + ["  no what-if (nothing predicted)"]
    for i in range(len(whatif)):
        w = whatif[i]
        p = w["predicted"]
        box = relaunch(cfg, whatif[: i + 1])
        knee, steps = sweep_knee(box, most=max(64, int(4 * p["concurrency"])))
        named, truth, diagnosed = measured_limit(box, knee[0])
        ratio = p["throughput_tok_s"] / knee[1] if knee[1] else float("nan")
        # The limits are in running sequences: set them beside what ran at the knee.
        c_ratio = p["concurrency"] / knee[2] if knee[2] else float("nan")
        ok_tok = GOAL[0] <= ratio <= GOAL[1]
        ok_lim = named == p["limit"]
        change = " + ".join(
            f"{x['flag']} {x['current']} -> {x['proposed']}" for x in whatif[: i + 1]
        )
        rows.append(
            f"  [{i}] {change}: predicted {p['limit']} at {p['concurrency']:.3g} running, "
            f"{p['throughput_tok_s']:.0f} tok/s (x{p['gain']:.3g}), ITL x{p['itl_growth']:.3g}; "
            f"next {(w['next_limit'] or {}).get('limit')} at "
            f"{(w['next_limit'] or {}).get('concurrency')}"
        )
        rows.append(
            f"      measured knee {knee[0]} streams, {knee[1]:.0f} tok/s, {knee[2]:.3g} running; "
            f"past it ({max(2 * knee[0], knee[0] + 2)} streams) the engine held requests for "
            f"{', '.join(f'{k} {100 * v:.0f}%' for k, v in truth.items())}, headroom names "
            f"{diagnosed}; tok/s predicted/measured {ratio:.3f}, running "
            f"{c_ratio:.3f}; limit named {'right' if ok_lim else 'WRONG'}; "
            f"{'within' if ok_tok else 'OUTSIDE'} {GOAL[0]}-{GOAL[1]}"
        )
        rows.append(
            "      steps (c:tok/s running waiting) "
            + " ".join(f"{s[0]}:{s[1]:.0f}/{s[2]:.3g}/{s[3]:.2g}" for s in steps)
        )
    rows.append(f"  [{time.monotonic() - t0:.0f} s]")
    return rows


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "whatif_sim.txt")
    p.add_argument("--only", default=",".join(CASES))
    args = p.parse_args()
    rows = [
        "# what-if from one window vs the relaunched simulator (bench/whatif_sim.py)",
        f"# {time.strftime('%Y-%m-%d %H:%M')} on {platform.node()}; virtual clock, windows of "
        "40 s after 60 s warm-up; sweep: doubling from 1 stream, then bisecting; knee = the "
        "highest load from which throughput still gained 10% per doubling",
        "",
    ]
    for name in args.only.split(","):
        out = run_case(name)
        print("\n".join(out), flush=True)
        rows += out
    args.out.write_text("\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
