"""Token-exact prompt lengths: find words that are one token each for the served model.

Prompts are runs of words. If every word is exactly one token after a space, and the
tokenizer adds a fixed number of tokens around a prompt (BOS, a chat template), then
k words make k + overhead tokens. The calibration asks the tokenizer once, in the sweep
process before any load: the server's ``/tokenize`` where it has one (vLLM), else a local
``tokenizers`` file. Workers then build exact prompts from the word list without a
tokenizer of their own.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from loadgen.preflight import api_key
from loadgen.prompts import WORDS
from monitor.core.errors import ConfigError

# Counts a prompt: (text, as_chat) -> tokens the model sees.
Counter = Callable[[str, bool], int]

CHECK_WORDS = 64  # words in the prompt that verifies a calibration end to end


@dataclass(frozen=True, slots=True)
class Calibration:
    words: tuple[str, ...]  # each one token after a space
    completions_overhead: int  # tokens the server adds to a completions prompt (BOS)
    chat_overhead: int | None  # tokens a one-message chat adds around its content; None: unknown
    source: str  # what was asked: "the server's /tokenize", "tokenizer FILE"


class ServerCounter:
    """Counts through vLLM's ``/tokenize``; one connection, closed by ``close()``."""

    def __init__(self, target: str, model: str, timeout: float = 10.0) -> None:
        key = api_key()
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._client = httpx.Client(timeout=timeout, headers=headers)
        self._url = target.rstrip("/") + "/tokenize"
        self._model = model
        self.max_model_len: int | None = None  # vLLM says it with every answer

    def __call__(self, text: str, chat: bool) -> int:
        body: dict = {"model": self._model}
        if chat:
            body["messages"] = [{"role": "user", "content": text}]
        else:
            body["prompt"] = text
        r = self._client.post(self._url, json=body)
        r.raise_for_status()
        data = r.json()
        if isinstance(data.get("max_model_len"), int):
            self.max_model_len = data["max_model_len"]
        return int(data["count"])

    def vocab_words(self, limit: int = 600) -> list[str]:
        """Words the model's vocabulary holds whole, found through ``/detokenize``.

        A small vocabulary (a tiny test model's) splits common English words; its own
        tokens, decoded, are the candidates then.
        """
        r = self._client.post(self._url, json={"model": self._model, "prompt": " ".join(WORDS)})
        r.raise_for_status()
        top = max(r.json().get("tokens") or [0])
        ids = random.Random(0).sample(range(top + 1), min(limit, top + 1))
        out: list[str] = []
        url = self._url.removesuffix("/tokenize") + "/detokenize"
        for i in ids:
            d = self._client.post(url, json={"model": self._model, "tokens": [i]})
            if d.status_code != 200:
                return out
            text = str(d.json().get("prompt", "")).strip()
            if text.isalpha() and text.isascii() and text not in out:
                out.append(text)
        return out

    def close(self) -> None:
        self._client.close()


def server_counter(target: str, model: str, timeout: float = 10.0) -> ServerCounter | None:
    """A counter through the server's ``/tokenize``; None when it has none."""
    count = ServerCounter(target, model, timeout)
    try:
        count("the", False)
    except (httpx.HTTPError, KeyError, ValueError, TypeError):
        count.close()
        return None
    return count


def local_counter(spec: str) -> Counter:
    """A counter from a local ``tokenizer.json`` (or a folder holding one).

    Names on the Hugging Face hub are not fetched: headroom never downloads, so a
    name must be a path here.
    """
    try:
        from tokenizers import Tokenizer
    except ImportError:  # pragma: no cover - a dependency
        raise ConfigError(
            "--tokenizer needs the 'tokenizers' package (pip install tokenizers)"
        ) from None
    p = Path(spec).expanduser()
    tried = [p / "tokenizer.json", p] if p.is_dir() else [p]
    for f in tried:
        if f.is_file():
            try:
                tok = Tokenizer.from_file(str(f))
            except Exception as exc:
                raise ConfigError(
                    f"--tokenizer {spec}: {f} is not a tokenizers file ({str(exc)[:120]})"
                ) from None

            count = _LocalCounter(tok)
            return count
    raise ConfigError(
        f"--tokenizer {spec}: cannot load a tokenizer, tried {', '.join(map(str, tried))} "
        "(a local tokenizer.json or a folder holding one; hub names are not downloaded)"
    )


class _LocalCounter:
    def __init__(self, tok: object) -> None:
        self._tok = tok

    def __call__(self, text: str, chat: bool) -> int:
        return len(self._tok.encode(text).ids)  # type: ignore[attr-defined]

    def vocab_words(self, limit: int = 600) -> list[str]:
        # Byte-level BPE marks a leading space with "Ġ", SentencePiece with "▁".
        vocab = self._tok.get_vocab()  # type: ignore[attr-defined]
        out = [k[1:] for k in vocab if k[:1] in ("Ġ", "▁") and k[1:].isalpha() and k[1:].isascii()]
        return sorted(out)[:limit]


MIN_WORDS = 20


def calibrate(
    count: Counter, source: str, chat_known: bool, candidates: Sequence[str] = WORDS
) -> Calibration | None:
    """The one-token words and the fixed overhead; None when lengths cannot be made exact.

    Common English words first; a vocabulary too small to hold them whole (a test model's)
    gets its own words, where the counter can list them.
    """
    try:
        base = count("", False)  # what the tokenizer adds around any prompt (a BOS)
    except (httpx.HTTPError, ValueError, KeyError, TypeError):
        base = count("the", False) - 1
    words = [w for w in candidates if count(" ".join([w] * 4), False) - base == 4]
    more = getattr(count, "vocab_words", None)
    if len(words) < MIN_WORDS and more is not None:
        try:
            extra = more()
        except (httpx.HTTPError, ValueError, KeyError, TypeError):
            extra = []
        words += [
            w for w in extra if w not in words and count(" ".join([w] * 4), False) - base == 4
        ]
    if len(words) < MIN_WORDS:
        return None
    # End to end: a random run of the chosen words must be exactly its length plus overhead.
    rng = random.Random(0)
    text = " ".join(rng.choice(words) for _ in range(CHECK_WORDS))
    if count(text, False) != CHECK_WORDS + base:
        return None
    chat = None
    if chat_known:
        chat = count(text, True) - CHECK_WORDS
    return Calibration(tuple(words), base, chat, source)
