"""Writes chat-longtail.jsonl: 200 made-up ShareGPT-format conversations with production-like lengths.

The text is filler (common English words, about one token each for most tokenizers);
what matters for load is the lengths. Prompt and reply lengths are drawn from
log-normal distributions whose means match the ShareGPT figures in the vLLM paper
(Kwon et al., "Efficient Memory Management for Large Language Model Serving with
PagedAttention", SOSP 2023, section 6.1: ShareGPT prompts average 161.31 tokens and
outputs 337.99; their histograms are long-tailed, most requests short and a few
very long). The sigmas (1.1 for prompts, 0.9 for replies) give that long tail: medians
well under the means, a p99 several times them. Each conversation's prompt plus reply
is capped at 1000 tokens so that every entry fits a server started with
--max-model-len 1024 (the tiny vLLM of deploy/vllm-cpu); the cap trims the tail a
little, so the file's own means are printed when it is written.

Run: python datasets/make_chat_longtail.py  (deterministic: the same file every time)
"""

from __future__ import annotations

import json
import math
import random
import statistics
from pathlib import Path

OUT = Path(__file__).with_name("chat-longtail.jsonl")
N = 200
PROMPT_MEAN, PROMPT_SIGMA = 161.31, 1.1
REPLY_MEAN, REPLY_SIGMA = 337.99, 0.9
CAP = 1000
WORDS = (
    "the of and to in is you that it he was for on are as with his they at be this have from "
    "or one had by word but not what all were we when your can said there use an each which she "
    "do how their if will up other about out many then them these so some her would make like "
    "him into time has look two more write go see number no way could people my than first "
    "water been call who its now find long down day did get come made may part"
).split()


def lognormal(rng: random.Random, mean: float, sigma: float) -> int:
    # mean = exp(mu + sigma^2 / 2)  =>  mu = ln(mean) - sigma^2 / 2
    return max(1, round(rng.lognormvariate(math.log(mean) - sigma**2 / 2, sigma)))


def main() -> None:
    rng = random.Random(17)
    rows, ins, outs = [], [], []
    for i in range(N):
        n_in = min(lognormal(rng, PROMPT_MEAN, PROMPT_SIGMA), CAP - 16)
        n_out = min(lognormal(rng, REPLY_MEAN, REPLY_SIGMA), CAP - n_in)
        ins.append(n_in)
        outs.append(n_out)
        ask = " ".join(rng.choice(WORDS) for _ in range(n_in))
        reply = " ".join(rng.choice(WORDS) for _ in range(n_out))
        rows.append({"id": f"longtail-{i:03d}", "conversations": [
            {"from": "human", "value": ask}, {"from": "gpt", "value": reply}]})  # fmt: skip
    with OUT.open("w", encoding="utf-8") as fh:
        for r in rows:
            fh.write(json.dumps(r) + "\n")

    def pct(xs: list[int], q: float) -> int:
        return sorted(xs)[min(len(xs) - 1, int(q * len(xs)))]

    for name, xs in (("prompt", ins), ("reply", outs)):
        print(f"{name}: mean {statistics.mean(xs):.1f} median {statistics.median(xs):.0f} "
              f"p90 {pct(xs, 0.9)} p99 {pct(xs, 0.99)} max {max(xs)} (words)")  # fmt: skip


if __name__ == "__main__":
    main()
