"""The tune's path on the simulator's virtual clock (virtual_tune.py), and the two choices
behind it, on the kv-cap box where two caps bind together and the GPU is named at the knee.

Session 15's kv-cap tune took 5 launches to reach the grid's best: at 640 blocks and
max_num_seqs 64 both caps bind at 64 sequences, and the what-if raised them together only
just past each other (640 -> 790 and 64 -> 93, then 1179 / 134, 1637 / 193). On the virtual
clock the same box's knee was named compute-bound (the GPU busy, the sequence cap holding 64
requests back), and the tune stopped at once."""

from __future__ import annotations

import copy

from virtual_tune import tune
from whatif_rows import change

from loadgen import tune_plan as plan
from monitor.diagnosis.whatif import Knobs, Load, StepModel, predict
from simulator.scenarios import build

# The bench's traffic (bench/tune_vs_grid_sim.py: 128-token prompts, 32 tokens out).
TRAFFIC = {"prompt_tokens": 128, "prompt_jitter": 0.0, "output_tokens": 32, "output_jitter": 0.0}


def test_kv_cap_box_both_caps_doubled_together_past_a_gpu_named_knee() -> None:
    knobs = plan.parse_knobs(["num_blocks=320:2560", "max_num_seqs=64:256"], grid=False)
    t = tune(build("kv-cap", load=TRAFFIC), knobs, max_runs=4, warmup_s=5.0, window_s=5.0)
    path = [r["knobs"] for r in t["runs"]]
    assert path == [{"num_blocks": 320, "max_num_seqs": 64},
                    {"num_blocks": 640, "max_num_seqs": 64},
                    {"num_blocks": 1280, "max_num_seqs": 128},
                    {"num_blocks": 2560, "max_num_seqs": 256}]  # fmt: skip
    r0, r1, r2, r3 = t["runs"]
    # At 640 / 64 the GPU is named, the engine's what-if leads with the pair: followed, noted.
    assert r1["cause"] in plan.GPU_CAUSES and "what-if" in r1["decision"]["note"]
    # The doubling of both bought a third more tokens, as the what-if said within 0.8-1.25.
    assert r2["throughput_tok_s"] > 1.25 * r1["throughput_tok_s"]
    # At 1280 / 128 the what-if puts the GPU's knee at the caps and proposes nothing; the
    # step's growth over the sweep's own steps says the knee still gives: both doubled again,
    # and the box gave more still (the grid's best on this box: 2560 / 256).
    assert r2["cause"] in plan.GPU_CAUSES and "running **" in r2["decision"]["note"]
    assert r3["throughput_tok_s"] > 1.1 * r2["throughput_tok_s"]
    assert all(0.8 <= p["ratio"] <= 1.25 for p in t["predictions"][1:])


def test_two_caps_that_bind_together_are_raised_as_a_pair_by_a_doubling() -> None:
    # The KV cache fills 10% past the sequence cap, the GPU's knee far behind: raised just past
    # each other the pair would climb by 1.2x a launch.
    load = Load(running=64.0, tokens_per_s=5000.0, rate_rps=150.0,
                limits={"seq-cap": 1.0, "kv-cap": 1.1, "compute": 4.0},
                step=StepModel(compute=0.2))  # fmt: skip
    first, second = predict(load, Knobs(seq_cap=64, num_gpu_blocks=640))
    assert (first["knob"], first["proposed"]) == ("max_num_seqs", 128)
    assert "sized with the change below: kv-cap binds with it" in first["basis"]["assumed"]
    assert (second["knob"], second["proposed"]) == ("num_gpu_blocks", 1280)
    assert second["predicted"]["concurrency"] == 128.0
    # A cap 20% or more behind is not tied: the change stops just past it, as before.
    load = Load(running=64.0, tokens_per_s=5000.0, rate_rps=150.0,
                limits={"seq-cap": 1.0, "kv-cap": 1.3, "compute": 4.0},
                step=StepModel(compute=0.2))  # fmt: skip
    assert predict(load, Knobs(seq_cap=64, num_gpu_blocks=640))[0]["proposed"] == 100


# The what-if at a knee where the KV cache and the sequence cap bind together: the first
# change alone buys nothing.
PAIR = [
    change("num_gpu_blocks", 640, 1280, 1.0, "seq-cap"),
    change("max_num_seqs", 64, 128, 1.8, "kv-cap"),
]
KNOBS = ["num_blocks=320:2560", "max_num_seqs=64:256"]
NOW = {"num_blocks": 640, "max_num_seqs": 64}


def _sweep(cause: str) -> dict:
    steps = [
        {"concurrency": c, "valid": True, "output_tokens_per_s": 80.0 * c,
         "whatif": copy.deepcopy(PAIR)}
        for c in (32, 64, 128)
    ]  # fmt: skip
    sat = {"reached": True, "concurrency": 64, "output_tokens_per_s": 5000.0, "cause": cause}
    return {"steps": steps, "saturation": sat, "goodput": None}


def _run(sweep: dict, tok: float = 5000.0) -> dict:
    return {"index": 1, "status": "ok", "knobs": dict(NOW), **plan.summarise(sweep),
            "throughput_tok_s": tok}  # fmt: skip


def test_the_second_knob_of_a_pair_is_changed_with_the_first() -> None:
    # The sweep names the sequence cap, whose change the what-if makes on top of the KV
    # cache's: alone it would buy nothing (the cache binds at once).
    sweep = _sweep("seq-cap")
    d = plan.decide(sweep, _run(sweep), plan.parse_knobs(KNOBS, False), NOW)
    assert (d.knob, d.to) == ("num_blocks", 1280)
    assert [(c["knob"], c["to"]) for c in d.also or []] == [("max_num_seqs", 128)]
    assert d.gain == 1.8


def test_a_gpu_named_knee_follows_the_engine_s_what_if_until_a_change_gains_nothing() -> None:
    knobs = plan.parse_knobs(KNOBS, False)
    sweep = _sweep("compute-bound")
    first = _run(sweep)
    d = plan.decide(sweep, first, knobs, NOW)
    assert (d.knob, d.to) == ("num_blocks", 1280) and "compute-bound" in d.note
    first["decision"] = d.to_json()
    now = {"num_blocks": 1280, "max_num_seqs": 128}
    flat = {**_run(sweep, 5100.0), "index": 2, "knobs": now}
    d2 = plan.decide(sweep, flat, knobs, now, first)
    assert d2.knob is None and "compute-bound again" in d2.stop and "x1.02" in d2.stop
    # Without a what-if at the knee (the GPU binds first there), the tune stops on the cause.
    bare = _sweep("memory-bound")
    for s in bare["steps"]:
        s["whatif"] = []
    d3 = plan.decide(bare, _run(bare), knobs, NOW)
    assert d3.knob is None and "memory-bound, has no knob" in d3.stop


def test_past_a_gpu_named_knee_the_caps_bound_with_it_are_doubled_by_the_measured_growth() -> None:
    knobs = plan.parse_knobs(KNOBS, False)
    sweep = _sweep("compute-bound")
    # The what-if has nothing (its step model puts the GPU's knee at the caps); the knee's
    # headroom figure has both caps bound; a step grew as running ** 0.5 from 32 to 64.
    for s in sweep["steps"]:
        s["whatif"] = []
        s["running_mean"] = float(min(s["concurrency"], 64))
        s["headroom"] = {"limits": {"seq-cap": 1.0, "kv-cap": 1.08, "compute": 1.0}}
    sweep["steps"][0]["output_tokens_per_s"] = 4000.0 / 2**0.5
    sweep["steps"][1]["output_tokens_per_s"] = 4000.0
    d = plan.decide(sweep, _run(sweep, 4000.0), knobs, NOW)
    assert (d.knob, d.to) == ("num_blocks", 1280)
    assert [(c["knob"], c["to"]) for c in d.also or []] == [("max_num_seqs", 128)]
    assert abs(d.gain - 2**0.5) < 0.01 and "running ** 0.50" in d.note
    # A step that grew with the sequences as fast as they came (the GPU's knee reached): stop.
    sweep["steps"][0]["output_tokens_per_s"] = 4000.0
    d = plan.decide(sweep, _run(sweep, 4000.0), knobs, NOW)
    assert d.knob is None and "compute-bound, has no knob" in d.stop


def _cpu_sweep(tok_at_2: float) -> dict:
    # vLLM's CPU build at max_num_seqs 4: the what-if read no GPU and assumes flat steps.
    w = {
        **change("max_num_seqs", 4, 8, 2.0, "seq-cap"),
        "basis": {"assumed": ["steps do not lengthen with the batch (no GPU activity read)"]},
    }
    tok = {1: 100.0, 2: tok_at_2, 4: 200.0, 8: 200.0}
    steps = [
        {
            "concurrency": c,
            "valid": True,
            "output_tokens_per_s": t,
            "running_mean": float(min(c, 4)),
            "whatif": [dict(w)],
        }
        for c, t in tok.items()
    ]
    sat = {"reached": True, "concurrency": 4, "output_tokens_per_s": 200.0, "cause": "seq-cap"}
    return {"steps": steps, "saturation": sat, "goodput": None}  # fmt: skip


def test_without_a_gpu_reading_the_gain_is_read_at_the_step_growth_the_sweep_measured() -> None:
    knobs = plan.parse_knobs(["max_num_seqs=4:16"], False)
    now = {"max_num_seqs": 4}
    # From 2 to 4 running the tokens grew 1.41x: a step grew as running ** 0.5.
    sweep = _cpu_sweep(200.0 / 2**0.5)
    run = {"index": 0, "status": "ok", "knobs": now, **plan.summarise(sweep)}
    d = plan.decide(sweep, run, knobs, now)
    assert (d.knob, d.to) == ("max_num_seqs", 8)
    assert abs(d.gain - 2**0.5) < 0.01 and d.step_growth == {"exponent": 0.5, "steps": [2, 4]}
    # The engine's cores already full at 2 running (no more tokens at 4): nothing to gain.
    sweep = _cpu_sweep(200.0)
    run = {"index": 0, "status": "ok", "knobs": now, **plan.summarise(sweep)}
    d = plan.decide(sweep, run, knobs, now)
    assert d.knob is None and "gain 1.00x" in d.stop and "running ** 1.00" in d.stop


def test_a_pair_s_lead_at_its_bound_is_said_once() -> None:
    # The vLLM-CPU tune's last stop read "max_num_seqs is at its bound 8" twice: once for the
    # cause's knob, once for the blocks, whose change rides on it.
    knobs = plan.parse_knobs(["num_blocks=320:640", "max_num_seqs=64:256"], False)
    sweep = _sweep("kv-cap")
    now = {"num_blocks": 640, "max_num_seqs": 64}
    d = plan.decide(sweep, _run(sweep), knobs, now)
    assert d.stop == "num_blocks is at its bound 640"


def test_a_pair_made_together_is_stretched_to_the_first_knob_s_doubling() -> None:
    # The vLLM-CPU tune at max_num_seqs 4 and 10 blocks: the what-if sized the cap just past
    # the KV cache's fill (4 -> 7, the cache 1.35x behind) and the blocks just past that
    # (10 -> 16); made in one relaunch, both go to the cap's doubling, a launch saved.
    sweep = _cpu_sweep(200.0 / 2**0.5)
    pair = [
        change("max_num_seqs", 4, 7, 1.35, "kv-cap"),
        change("num_gpu_blocks", 10, 16, 1.3, "seq-cap"),
    ]
    for s in sweep["steps"]:
        s["whatif"] = copy.deepcopy(pair)
        s["headroom"] = {"limits": {"seq-cap": 1.0, "kv-cap": 1.35}}
    knobs = plan.parse_knobs(["max_num_seqs=2:8", "num_gpu_blocks_override=10:40"], False)
    now = {"max_num_seqs": 4, "num_gpu_blocks_override": 10}
    run = {"index": 1, "status": "ok", "knobs": now, **plan.summarise(sweep)}
    d = plan.decide(sweep, run, knobs, now)
    assert (d.knob, d.proposed, d.to) == ("max_num_seqs", 7, 8)
    assert [(c["knob"], c["proposed"], c["to"]) for c in d.also or []] == [
        ("num_gpu_blocks_override", 16, 19)
    ]
    # The gain grows by the stretch at the step's growth the sweep measured (running ** 0.5).
    assert d.stretch == round(8 / 7, 3)
    assert abs(d.gain - 1.35 * 1.3 * (8 / 7) ** 0.5) < 0.01
    # A limit close behind the pair (the engine's CPU at 1.5x) holds the stretch short of it.
    for s in sweep["steps"]:
        s["headroom"]["limits"]["cpu"] = 1.5
    d = plan.decide(sweep, run, knobs, now)
    assert d.stretch is None and d.to == 7
