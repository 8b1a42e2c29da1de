"""What kind of work a hot engine thread does, from its Python frames, and the fix that follows.

Each frame is matched on its function name and file (vLLM's own modules, the
tokenizers, the simulator's stand-ins); a sample counts for the innermost frame that
matches, so the kinds of one thread add up to at most 1. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from monitor.profiling.stacks import FunctionShare

WAIT = "wait"
DETOKENISE = "detokenise"
SCHEDULE = "schedule"
SAMPLE = "sample"
TOKENISE = "tokenise"
KINDS = (WAIT, DETOKENISE, SCHEDULE, SAMPLE, TOKENISE)

# A kind names the fix once it holds this share of the thread's samples and leads the others.
DOMINANT_SHARE = 0.25

# (kind, function pattern, file pattern): either may match; order decides ties.
_RULES: tuple[tuple[str, re.Pattern[str] | None, re.Pattern[str] | None], ...] = (
    (
        # Busy-polling for another process (vLLM's engine core and its worker hand each
        # step over through shared memory and spin on sched_yield while they wait).
        WAIT,
        re.compile(r"^sched_yield$|acquire_read|\.dequeue$|wait_for_reply|\.poll$"),
        None,
    ),
    (
        DETOKENISE,
        re.compile(
            r"detoken|decode_next|convert_ids_to_tokens|_decode|process_outputs|"
            r"stream_generator|_stream|make_sse|serialize_response",
            re.I,
        ),
        re.compile(r"detokenizer|output_processor|serving_chat|serving_completion", re.I),
    ),
    (
        SCHEDULE,
        re.compile(r"(^|\.)_?schedule$|update_from_output|allocate_slots|get_computed_blocks"),
        re.compile(r"core/sched/|kv_cache_manager|block_pool|kv_cache_coordinator"),
    ),
    (
        SAMPLE,
        re.compile(r"(^|\.)_?sample$|top_k_top_p|apply_penalties|compute_logprobs|sampler", re.I),
        re.compile(r"sample/|sampler", re.I),
    ),
    (
        TOKENISE,
        re.compile(r"(^|\.)encode|(?<!de)tokenize|apply_chat_template", re.I),
        re.compile(r"tokenizer|renderer|input_processor", re.I),
    ),
)

FIXES = {
    WAIT: (
        "the thread mostly busy-waits for another process (vLLM's engine core and its worker "
        "hand each step over): the time goes where that process works; profile it (--pid)"
    ),
    DETOKENISE: (
        "detokenising and streaming dominate: move them off the engine loop (vLLM does this in "
        "the API server: run more API-server processes with --api-server-count), stream fewer, "
        "larger chunks"
    ),
    SCHEDULE: (
        "scheduling dominates: overlap it with the GPU step (vLLM --async-scheduling) and make "
        "fewer, larger steps (raise --max-num-batched-tokens, fewer tiny requests)"
    ),
    SAMPLE: (
        "sampling dominates: sample on the GPU (avoid per-request logits processors, "
        "logprobs and penalties computed on the host)"
    ),
    TOKENISE: (
        "prompt tokenising dominates: more API-server processes (--api-server-count), or "
        "send token ids instead of text"
    ),
}


def classify(function: str, file: str) -> str | None:
    for kind, fn_re, file_re in _RULES:
        if fn_re is not None and fn_re.search(function):
            return kind
        if file_re is not None and file and file_re.search(file):
            return kind
    return None


def dominant(kinds: Sequence[tuple[str, float]]) -> tuple[str, float] | None:
    """The kind of work that decides the fix, or None when no kind holds DOMINANT_SHARE."""
    best = max(kinds, key=lambda kv: kv[1], default=None)
    if best is None or best[1] < DOMINANT_SHARE:
        return None
    return best


def describe(functions: Sequence[FunctionShare], n: int = 3) -> str:
    """'41% in detokenize (vllm/v1/engine/detokenizer.py:120), 23% in schedule (...)'"""
    return ", ".join(
        f"{100 * f.self_share:.0f}% in {f.function} ({f.where()})" for f in functions[:n]
    )


def fix_for(kinds: Sequence[tuple[str, float]], functions: Sequence[FunctionShare]) -> str:
    """The fix that follows from what the thread spends its time on."""
    top = dominant(kinds)
    if top is not None:
        kind, share = top
        return f"{FIXES[kind]} ({100 * share:.0f}% of the thread's samples)"
    if functions:
        return "no single kind of work dominates; start from the top frames: " + describe(
            functions, 3
        )
    return "the profile caught no samples of the thread: profile longer"
