"""Writes trace-sample.jsonl: a made-up one-minute request log in the Mooncake layout.

Arrivals come in bursts (a Poisson background of 3 req/s, plus a burst of 15 requests
within half a second every 12 s), prompts are long-tailed (log-normal, mean ~600
tokens) and most of them start with one of a few shared system prompts, named by
``hash_ids`` as Mooncake's traces do (one id per block of --trace-block-tokens, 512 by
default): ids 0-1 are one 1024-token system prompt, ids 2-3 another. Timestamps are
seconds from the start.

Run: python datasets/make_trace_sample.py  (deterministic)
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

OUT = Path(__file__).with_name("trace-sample.jsonl")
SPAN_S = 60.0
BLOCK = 512


def main() -> None:
    rng = random.Random(17)
    times = []
    t = 0.0
    while True:
        t += rng.expovariate(3.0)
        if t >= SPAN_S:
            break
        times.append(t)
    for burst in range(1, int(SPAN_S // 12) + 1):
        times += [12.0 * burst - 6 + rng.uniform(0, 0.5) for _ in range(15)]
    next_id = 4
    rows = []
    for t in sorted(times):
        n_in = max(8, round(rng.lognormvariate(math.log(600) - 0.32, 0.8)))
        n_out = max(4, round(rng.lognormvariate(math.log(150) - 0.32, 0.8)))
        system = rng.random()
        hashes = [0, 1] if system < 0.5 else [2, 3] if system < 0.8 else []
        n_in = max(n_in, len(hashes) * BLOCK + 8)
        own = math.ceil(n_in / BLOCK) - len(hashes)
        hashes += list(range(next_id, next_id + own))
        next_id += own
        rows.append({"timestamp": round(t, 3), "input_length": n_in, "output_length": n_out,
                     "hash_ids": hashes})  # fmt: skip
    OUT.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"{len(rows)} requests over {rows[-1]['timestamp']:.1f} s")


if __name__ == "__main__":
    main()
