"""What to send: synthetic prompts of set lengths (and spread), or prompts from a JSONL file.

Synthetic prompts are runs of common English words, which most BPE tokenizers
map to about one token each; a random lead word per request keeps a server's
prefix cache from serving them all from one cached block. The server's usage
figures report the true token counts. Given a calibration (``loadgen.tokens``:
words known to be one token each and the tokens the server adds around a prompt),
the lengths are exact. Shared prefixes (one of G system prompts of N tokens) and
trace blocks (text fixed by a block's hash id, so requests naming the same ids
share a prefix) are built from the same words, seeded so every worker process
builds the same text.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from monitor.core.errors import ConfigError

LengthDist = Literal["fixed", "uniform", "normal", "exponential"]
LENGTH_DISTS: tuple[LengthDist, ...] = ("fixed", "uniform", "normal", "exponential")

WORDS = (
    "the of and to in is you that it he was for on are as with his they at be this have from or "
    "one had by word but not what all were we when your can said there use an each which she do "
    "how their if will up other about out many then them these so some her would make like him "
    "into time has look two more write go see number no way could people my than first water "
    "been call who oil its now find long down day did get come made may part over new sound take "
    "only little work know place year live me back give most very after thing our just name good "
    "sentence man think say great where help through much before line right too mean old any same "
    "tell boy follow came want show also around form three small set put end does another well "
    "large must big even such because turn here why ask went men read need land different home us "
    "move try kind hand picture again change off play spell air away animal house point page letter"
).split()


@dataclass(frozen=True, slots=True)
class Prompt:
    prompt: str | None  # for /v1/completions
    messages: tuple[dict, ...] | None  # for /v1/chat/completions
    max_tokens: int
    # The prompt length asked for, in the model's tokens (None: not known, e.g. a file's text).
    input_tokens: int | None = None


def sample_length(rng: random.Random, mean: int, dist: LengthDist, spread: float) -> int:
    """A length around ``mean``: ``spread`` is the half-width (uniform) or sd (normal) as a share of it."""
    if dist == "fixed" or mean <= 1:
        return max(1, mean)
    if dist == "uniform":
        lo, hi = mean * (1 - spread), mean * (1 + spread)
        return max(1, round(rng.uniform(lo, hi)))
    if dist == "normal":
        return max(1, round(rng.gauss(mean, spread * mean)))
    if dist == "exponential":
        return max(1, math.ceil(rng.expovariate(1.0 / mean)))
    raise ConfigError(f"unknown length distribution {dist!r}; use one of {', '.join(LENGTH_DISTS)}")


def synthetic_words(rng: random.Random, tokens: int) -> list[str]:
    return [f"{rng.randrange(10**9)}", *rng.choices(WORDS, k=max(0, tokens - 2))]


def synthetic_text(rng: random.Random, tokens: int) -> str:
    return " ".join(synthetic_words(rng, tokens))


def seeded_words(key: str, n: int, words: Sequence[str]) -> list[str]:
    """The same ``n`` words for the same key in every process (a shared prefix, a trace block)."""
    rng = random.Random(key)
    return [rng.choice(words) for _ in range(max(0, n))]


AHEAD = 16


class PromptSource:
    """Yields prompts forever: synthetic, or cycling through a file's."""

    def __init__(
        self,
        api: Literal["completions", "chat"],
        input_tokens: int = 256,
        output_tokens: int = 128,
        dist: LengthDist = "fixed",
        spread: float = 0.5,
        file_prompts: Sequence[Prompt] = (),
        seed: int | None = None,
        words: Sequence[str] | None = None,
        overhead: int = 0,
        chat_overhead: int | None = None,
        prefix_tokens: int = 0,
        prefix_groups: int = 1,
    ) -> None:
        if input_tokens < 1 or output_tokens < 1:
            raise ConfigError("input and output lengths must be at least 1 token")
        if dist not in LENGTH_DISTS:
            raise ConfigError(
                f"unknown length distribution {dist!r}; use one of {', '.join(LENGTH_DISTS)}"
            )
        self.api = api
        self.input_tokens = input_tokens
        self.output_tokens = output_tokens
        self.dist = dist
        self.spread = spread
        self.file_prompts = list(file_prompts)
        self._rng = random.Random(seed)
        self._i = 0
        self._ahead: list[Prompt] = []  # built ahead, the next last (see next)
        # Exact lengths: every word one token, and the server's own tokens known.
        self.exact = words is not None
        self.words = tuple(words) if words is not None else WORDS
        self.overhead = overhead if api == "completions" else (chat_overhead or 0)
        self.prefix_tokens = max(0, prefix_tokens)
        self.prefixes = [
            seeded_words(f"prefix-{g}", self.prefix_tokens, self.words)
            for g in range(max(1, prefix_groups))
        ]

    def _body_words(self, tokens: int) -> list[str]:
        # (choices, not a choice a word: a prompt is built for every request.)
        if self.exact:
            return self._rng.choices(self.words, k=max(1, tokens))
        return synthetic_words(self._rng, tokens)

    def text(self, tokens: int, lead: Sequence[str] = ()) -> str:
        """``tokens`` tokens of prompt as the model will see them (exact when calibrated)."""
        body = tokens - len(lead) - (self.overhead if self.exact else 0)
        return " ".join([*lead, *self._body_words(body)])

    def make(self, n_in: int, n_out: int, lead: Sequence[str] = ()) -> Prompt:
        text = self.text(n_in, lead)
        if self.api == "chat":
            return Prompt(None, ({"role": "user", "content": text},), n_out, n_in)
        return Prompt(text, None, n_out, n_in)

    def trace_prompt(self, input_length: int, output_length: int, hash_ids: Sequence[int],
                     block_tokens: int) -> Prompt:  # fmt: skip
        """A trace entry's prompt: its hash ids' blocks (shared text), then fresh words."""
        lead: list[str] = []
        for h in hash_ids:
            lead += seeded_words(f"block-{h}", block_tokens, self.words)
        room = max(1, input_length - (self.overhead if self.exact else 0))
        return self.make(max(1, input_length), max(1, output_length), lead[: room - 1])

    def next(self) -> Prompt:
        """The next prompt. They are built AHEAD at a time, in the order and from the same
        random draws as one at a time: at low load about one request ends an engine step, and
        a prompt built alone runs its code on caches gone cold since the last."""
        ahead = self._ahead
        if not ahead:
            ahead.extend(self._build() for _ in range(AHEAD))
            ahead.reverse()
        return ahead.pop()

    def _build(self) -> Prompt:
        if self.file_prompts:
            p = self.file_prompts[self._i % len(self.file_prompts)]
            self._i += 1
            return p
        n_in = sample_length(self._rng, self.input_tokens, self.dist, self.spread)
        n_out = sample_length(self._rng, self.output_tokens, self.dist, self.spread)
        if self.prefix_tokens:
            prefix = self.prefixes[self._rng.randrange(len(self.prefixes))]
            return self.make(n_in + self.prefix_tokens, n_out, prefix)
        return self.make(n_in, n_out)


def load_jsonl(
    path: str | Path, api: Literal["completions", "chat"], default_max_tokens: int
) -> list[Prompt]:
    """Prompts from a JSONL file: each line a string, or {"prompt": ...} / {"messages": [...]},
    optionally with "max_tokens" (or "output_tokens")."""
    p = Path(path)
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ConfigError(f"cannot read prompts file {p}: {exc.strerror or exc}") from None
    prompts: list[Prompt] = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            raise ConfigError(f"{p}:{n}: not JSON") from None
        if isinstance(obj, str):
            obj = {"prompt": obj}
        if not isinstance(obj, dict):
            raise ConfigError(f"{p}:{n}: expected a string or an object")
        max_tokens = int(obj.get("max_tokens") or obj.get("output_tokens") or default_max_tokens)
        counted = obj.get("input_tokens")
        messages = obj.get("messages")
        text = obj.get("prompt") if obj.get("prompt") is not None else obj.get("text")
        if messages is None and text is None:
            raise ConfigError(f'{p}:{n}: needs "prompt" or "messages"')
        if api == "chat":
            if messages is None:
                messages = [{"role": "user", "content": str(text)}]
            prompts.append(
                Prompt(None, tuple(messages), max_tokens, int(counted) if counted else None)
            )
        else:
            if text is None:
                text = "\n".join(str(m.get("content", "")) for m in messages)
            prompts.append(Prompt(str(text), None, max_tokens, int(counted) if counted else None))
    if not prompts:
        raise ConfigError(f"{p}: no prompts")
    return prompts
