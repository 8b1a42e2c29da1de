"""steps.csv: one row per step, the flat fields of StepResult (GPU activity as gpu_*)."""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from pathlib import Path

from loadgen.schema import StepResult

_SKIP = {"verdicts", "whatif", "errors_sample", "gpu", "schema_version"}


def columns() -> list[str]:
    names = [n for n in StepResult.model_fields if n not in _SKIP]
    return names + [
        "gpu_util",
        "gpu_sm_active",
        "gpu_tensor_active",
        "gpu_dram_active",
        "first_error",
    ]


def write_csv(path: Path, steps: Sequence[StepResult]) -> None:
    cols = columns()
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=cols)
        w.writeheader()
        for s in sorted(steps, key=lambda s: s.index):
            row = {n: getattr(s, n) for n in cols if n in StepResult.model_fields}
            row.update(
                gpu_util=s.gpu.util,
                gpu_sm_active=s.gpu.sm_active,
                gpu_tensor_active=s.gpu.tensor_active,
                gpu_dram_active=s.gpu.dram_active,
                first_error=s.errors_sample[0] if s.errors_sample else "",
            )
            # Per-turn figures are small maps: JSON in one cell keeps them readable.
            w.writerow({k: "" if v is None else json.dumps(v) if isinstance(v, dict) else v
                        for k, v in row.items()})  # fmt: skip
