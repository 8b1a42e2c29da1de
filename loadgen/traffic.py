"""What the sweep sends, settled before any load: token calibration, dataset, trace.

The CLI checks every input file first (a bad one is one line and exit 1, before any
request), then, once the server is known, asks it (or a local tokenizer) how to make
prompts of exact lengths, and samples the dataset. The result is a set of
``WorkerConfig`` fields and notes for the user.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from loadgen.dataset import load_dataset, write_prompts
from loadgen.tokens import Calibration, Counter, calibrate, local_counter, server_counter
from loadgen.trace import load_trace

DATASET_FILE = "dataset-prompts.jsonl"


@dataclass
class Traffic:
    worker: dict[str, Any] = field(default_factory=dict)  # WorkerConfig fields
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    dataset_prompts: int | None = None
    calibration: Calibration | None = None


def check_files(
    dataset: str | None,
    trace: str | None,
    tokenizer: str | None,
    api: Literal["completions", "chat"],
    output_tokens: int | None,
    trace_time_unit_s: float = 1.0,
) -> Counter | None:
    """Every input that can be wrong without the server, read now; the local counter if any."""
    if dataset:
        load_dataset(dataset, api, output_tokens, output_tokens or 128)
    if trace:
        load_trace(trace, trace_time_unit_s)
    return local_counter(tokenizer) if tokenizer else None


def prepare(
    target: str,
    model: str,
    api: Literal["completions", "chat"],
    local: Counter | None,
    tokenizer: str | None,
    out_dir: Path,
    dataset: str | None = None,
    dataset_max_tokens: int | None = None,
    default_max_tokens: int = 128,
    dataset_limit: int = 1000,
    seed: int | None = None,
    exact_wanted: bool = True,
) -> Traffic:
    server = server_counter(target, model)
    try:
        t = Traffic()
        count = _calibrate(t, server, local, tokenizer, api, exact_wanted)
        if dataset:
            # Entries longer than the server's context would only come back as errors.
            limit_len = getattr(server, "max_model_len", None)
            _sample_dataset(t, dataset, api, count, limit_len, out_dir, dataset_max_tokens,
                            default_max_tokens, dataset_limit, seed)  # fmt: skip
        return t
    finally:
        if server is not None:
            server.close()


def _calibrate(
    t: Traffic,
    server: Counter | None,
    local: Counter | None,
    tokenizer: str | None,
    api: Literal["completions", "chat"],
    exact_wanted: bool,
) -> Counter | None:
    """Settle how prompts of exact lengths are made (into ``t``); the token counter, if any."""
    count: Counter | None = server
    source = "the server's /tokenize"
    if count is None and local is not None:
        count, source = local, f"tokenizer {tokenizer}"
    elif count is not None and tokenizer:
        t.notes.append(f"the server's /tokenize counts tokens; --tokenizer {tokenizer} not needed")
    if count is None:
        if exact_wanted:
            t.warnings.append(
                "the server has no /tokenize and no --tokenizer was given: prompt lengths "
                "are approximate (common words, about one token each)"
            )
        return None
    # A local tokenizer cannot apply the server's chat template: chat overhead unknown.
    cal = calibrate(count, source, chat_known=source.startswith("the server"))
    if cal is None:
        t.warnings.append(
            f"{source} does not tokenize common words one token each: prompt lengths "
            "are approximate"
        )
        return count
    t.calibration = cal
    t.worker.update(
        token_words=list(cal.words),
        prompt_overhead=cal.completions_overhead,
        chat_overhead=cal.chat_overhead,
        token_source=source,
    )
    if exact_wanted:
        added = (
            f"{cal.chat_overhead} token(s) around a chat message"
            if api == "chat" and cal.chat_overhead is not None
            else f"{cal.completions_overhead} token(s) added by the server"
        )
        t.notes.append(
            f"prompt lengths exact through {source} ({len(cal.words)} one-token words, {added})"
        )
    if api == "chat" and cal.chat_overhead is None and exact_wanted:
        t.warnings.append(
            f"{source} cannot apply the server's chat template: chat prompt lengths "
            "are exact in content only"
        )
    return count


def _sample_dataset(
    t: Traffic,
    dataset: str,
    api: Literal["completions", "chat"],
    count: Counter | None,
    limit_len: int | None,
    out_dir: Path,
    max_tokens: int | None,
    default_max_tokens: int,
    limit: int,
    seed: int | None,
) -> None:
    """Sample the dataset's prompts into a file the workers read (named in ``t``)."""
    counter = None if count is None else (lambda s: count(s, api == "chat"))
    ds = load_dataset(dataset, api, max_tokens, default_max_tokens, counter, seed, limit_len,
                      limit=limit)  # fmt: skip
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / DATASET_FILE
    write_prompts(ds.prompts, path)
    t.worker["prompts_file"] = str(path.resolve())
    t.dataset_prompts = len(ds.prompts)
    t.notes.append(
        f"dataset {dataset}: {len(ds.prompts)} prompts sampled from {ds.entries} "
        f"{ds.format} records (seed {seed}), lengths in {ds.lengths_from}"
    )
