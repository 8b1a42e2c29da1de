"""``--dataset FILE``: real conversations (ShareGPT) or a plain JSONL of prompts, sampled by seed.

ShareGPT files (a JSON array, or JSON Lines, of ``{"conversations": [{"from": "human",
"value": ...}, {"from": "gpt", "value": ...}, ...]}``) give their first human turn as the
prompt and the length of the reply that followed as ``max_tokens``, the way vLLM's and
GuideLLM's benchmarks read them. A plain JSONL of ``{"prompt" | "messages", "max_tokens"}``
is taken as it is. The sweep process loads and samples the file once, before any load, and
hands the workers a plain JSONL of what it chose.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from loadgen.prompts import Prompt
from monitor.core.errors import ConfigError

_HUMAN = ("human", "user")
_MODEL = ("gpt", "assistant", "chatgpt", "bard", "model")


@dataclass(frozen=True, slots=True)
class Dataset:
    prompts: list[Prompt]
    entries: int  # records in the file, usable or not
    format: str  # "sharegpt" or "jsonl"
    lengths_from: str  # how max_tokens and input_tokens were counted


def _read_records(path: Path) -> list[Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--dataset {path}: cannot read it ({exc})") from None
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise ConfigError(f"--dataset {path}: not JSON ({exc})") from None
        return list(data)
    records = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except ValueError:
            raise ConfigError(
                f"--dataset {path}:{n}: not JSON (expected a JSON array or one JSON object a line)"
            ) from None
    return records


def _turns(rec: dict) -> tuple[str, str | None] | None:
    """The first human turn and the model's reply to it, from a ShareGPT record."""
    conv = rec.get("conversations") or rec.get("conversation")
    if not isinstance(conv, list):
        return None
    for i, turn in enumerate(conv):
        if not isinstance(turn, dict):
            return None
        who = str(turn.get("from", turn.get("role", ""))).lower()
        text = turn.get("value", turn.get("content"))
        if who in _HUMAN and isinstance(text, str) and text.strip():
            reply = conv[i + 1] if i + 1 < len(conv) else None
            if isinstance(reply, dict):
                rwho = str(reply.get("from", reply.get("role", ""))).lower()
                rtext = reply.get("value", reply.get("content"))
                if rwho in _MODEL and isinstance(rtext, str) and rtext.strip():
                    return text, rtext
            return text, None
    return None


def load_dataset(
    path: str | Path,
    api: Literal["completions", "chat"],
    max_tokens: int | None,
    default_max_tokens: int,
    count: Callable[[str], int] | None = None,
    seed: int | None = None,
    max_model_len: int | None = None,
    limit: int = 1000,
) -> Dataset:
    """Usable prompts, shuffled by ``seed``. ``max_tokens`` (when given) overrides the replies'.

    ``count`` gives tokens for the served model (the server's /tokenize or a local
    tokenizer); without it lengths are counted in words, and said so. At most ``limit``
    prompts are kept; a step that needs more cycles through them.
    """
    p = Path(path)
    records = _read_records(p)
    # Sample first, count after: a tokenizer call per record is slow for a large file.
    order = list(range(len(records)))
    random.Random(seed).shuffle(order)
    counter = count or (lambda s: len(s.split()))
    prompts: list[Prompt] = []
    fmt = "jsonl"
    for i in order:
        if len(prompts) >= limit:
            break
        rec = records[i]
        if not isinstance(rec, dict):
            continue
        if "conversations" in rec or "conversation" in rec:
            fmt = "sharegpt"
            turns = _turns(rec)
            if turns is None:
                continue
            text, reply = turns
            if max_tokens is not None:
                out = max_tokens
            elif reply is not None:
                out = counter(reply)
            else:
                continue  # no reply to take a length from, and none given
            n_in = counter(text)
        else:
            text = rec.get("prompt")
            messages = rec.get("messages")
            if not isinstance(text, str) and not isinstance(messages, list):
                continue
            out = max_tokens or int(rec.get("max_tokens") or default_max_tokens)
            if isinstance(messages, list):
                if api == "chat":
                    prompts.append(Prompt(None, tuple(messages), max(1, out)))
                    continue
                text = "\n".join(str(m.get("content", "")) for m in messages if isinstance(m, dict))
            n_in = counter(str(text))
        if max_model_len is not None and n_in + out > max_model_len:
            continue  # the server would refuse it
        out = max(1, out)
        if api == "chat":
            prompts.append(Prompt(None, ({"role": "user", "content": text},), out, n_in))
        else:
            prompts.append(Prompt(str(text), None, out, n_in))
    if not prompts:
        raise ConfigError(
            f"--dataset {p}: no usable prompts in {len(records)} records (expected ShareGPT "
            '"conversations" with a human turn, or {"prompt" | "messages", "max_tokens"} lines)'
        )
    how = "the served model's tokens" if count is not None else "words (no tokenizer)"
    return Dataset(prompts, len(records), fmt, how)


def write_prompts(prompts: list[Prompt], path: Path) -> None:
    """The sampled prompts as the plain JSONL the workers read (``loadgen.prompts.load_jsonl``)."""
    with path.open("w", encoding="utf-8") as fh:
        for pr in prompts:
            obj: dict[str, Any] = {"max_tokens": pr.max_tokens}
            if pr.messages is not None:
                obj["messages"] = list(pr.messages)
            else:
                obj["prompt"] = pr.prompt
            if pr.input_tokens is not None:
                obj["input_tokens"] = pr.input_tokens
            fh.write(json.dumps(obj, ensure_ascii=False) + "\n")
