"""`headroom tune` and `--grid` on the simulated box's virtual clock.

Each run relaunches the box (a SimConfig with the run's knob values) and sweeps it as a tune's
run does: the sweep's adaptive plan (doubling, then bisecting the knee), each step a
closed-loop window read through headroom's own parsers (virtual_box.py) and diagnosed with
the caps the run was launched with (engine_view: the verdict, headroom figure and what-if),
the knee and its cause from the sweep's own analysis; then the tune's own decision
(tune_plan.decide) and the same records (runs[], best, predictions[]). No sockets, no
machine noise: a path of several runs costs seconds, and the same path comes out each time.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "diagnosis"))

from virtual_box import closed_loop  # noqa: E402

from loadgen import tune_plan as plan  # noqa: E402
from loadgen.analysis import find_saturation  # noqa: E402
from loadgen.engine_view import engine_view  # noqa: E402
from loadgen.plan import AdaptivePlan  # noqa: E402
from loadgen.schema import StepResult  # noqa: E402
from monitor.diagnosis import Caps  # noqa: E402
from simulator.config import SimConfig  # noqa: E402

# The simulator's setting each knob names.
SIM_FIELD = {
    "max_num_seqs": "max_num_seqs",
    "max_num_batched_tokens": "max_num_batched_tokens",
    "num_blocks": "num_blocks",
    "num_gpu_blocks_override": "num_blocks",
}


def launched(cfg: SimConfig, knobs: Mapping[str, float]) -> SimConfig:
    changes = {SIM_FIELD[k]: int(v) for k, v in knobs.items()}
    return dataclasses.replace(cfg, engine=dataclasses.replace(cfg.engine, **changes))


def sweep(cfg: SimConfig, *, most: int = 256, warmup_s: float = 5.0,
          window_s: float = 10.0) -> dict[str, Any]:  # fmt: skip
    """A sweep of the box as sweep.json holds it (steps, saturation), on virtual time."""
    caps = Caps(cfg.engine.max_num_seqs, cfg.engine.max_num_batched_tokens)
    adaptive = AdaptivePlan(1, most)
    steps: list[StepResult] = []
    while (x := adaptive.next(steps)) is not None:
        c = int(x)
        w = closed_loop(cfg, c, warmup_s=warmup_s, window_s=window_s)
        ev = engine_view(w, caps)
        e = w.engines[0]
        rps = e.requests_per_s or 0.0
        steps.append(StepResult(
            index=len(steps), mode="closed", concurrency=c, hold_start=0.0, hold_end=window_s,
            duration_s=window_s, requests_completed=round(rps * window_s), requests_failed=0,
            error_ratio=0.0, requests_per_s=rps,
            output_tokens_per_s=e.generation_tokens_per_s or 0.0,
            client_in_flight_mean=float(c), engine_in_flight_mean=ev.in_flight,
            running_mean=ev.running_mean, running_max=ev.running_max,
            waiting_mean=ev.waiting_mean, waiting_max=ev.waiting_max,
            waiting_p50=ev.waiting_p50, waiting_growth=ev.waiting_growth,
            kv_cache_usage_mean=ev.kv_cache_usage_mean, preemptions_per_s=ev.preemptions_per_s,
            engine_generation_tokens_per_s=ev.generation_tokens_per_s, verdict=ev.verdict,
            verdicts=ev.verdicts, headroom=ev.headroom, whatif=ev.whatif,
        ))  # fmt: skip
    sat = find_saturation(steps)
    return {"steps": [s.model_dump() for s in steps], "saturation": sat.model_dump(),
            "goodput": None}  # fmt: skip


def tune(cfg: SimConfig, knobs: Sequence[plan.KnobSpec], *, grid: bool = False,
         max_runs: int = 12, **sweep_kw: Any) -> dict[str, Any]:  # fmt: skip
    """The tune's (or the grid's) runs, best, predictions and why it stopped, as tune.json."""
    runs: list[dict[str, Any]] = []
    configs = plan.grid_configs(knobs) if grid else None
    stopped = f"--max-runs {max_runs} reached"
    while len(runs) < max_runs:
        if configs is not None:
            if len(runs) >= len(configs):
                stopped = "every combination run"
                break
            config = configs[len(runs)]
        elif not runs:
            config = plan.start_config(knobs)
        else:
            d = runs[-1]["decision"]
            if d.get("stop"):
                stopped = d["stop"]
                break
            config = {**runs[-1]["knobs"], d["knob"]: d["to"],
                      **{c["knob"]: c["to"] for c in d.get("also") or []}}  # fmt: skip
        result = sweep(launched(cfg, config), **sweep_kw)
        record: dict[str, Any] = {"index": len(runs), "knobs": dict(config), "status": "ok"}
        record.update(plan.summarise(result))
        if configs is None:
            d = plan.decide(result, record, knobs, config, runs[-1] if runs else None)
            record["decision"] = d.to_json()
        runs.append(record)
    preds = [p for a, b in zip(runs, runs[1:], strict=False)
             if (p := plan.prediction_row(a, b)) is not None]  # fmt: skip
    return {"runs": runs, "best": plan.best_run(runs, False), "predictions": preds,
            "stopped": stopped}  # fmt: skip
