"""steps.jsonl: one StepResult per line, appended as each step finishes."""

from __future__ import annotations

import json
import os
from pathlib import Path

from loadgen.schema import StepResult


def append_step(path: Path, step: StepResult) -> None:
    line = step.model_dump_json() + "\n"
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(line)
        fh.flush()
        os.fsync(fh.fileno())


def read_steps(path: Path) -> list[StepResult]:
    """The steps a sweep wrote; a torn last line (a crash mid-write) is skipped."""
    steps: list[StepResult] = []
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return steps
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            steps.append(StepResult.model_validate(json.loads(line)))
        except (ValueError, TypeError):
            continue
    return steps
