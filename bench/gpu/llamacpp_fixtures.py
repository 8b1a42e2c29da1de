"""Copy a llamacpp_h200.py run's recordings and snapshots into the test fixtures, trimmed.

    python bench/gpu/llamacpp_fixtures.py RESULTS_DIR [CASE[=NAME] ...]

Each recording keeps its header and raw snapshots whole (the replay recomputes from them);
each tick's report keeps only its time and verdicts, which the test compares with the
replay's. Snapshots (`headroom snapshot --json`) are copied as they are. NAME renames a
case in the fixtures (a later run's case of the same name stays apart).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEST = ROOT / "tests" / "fixtures" / "gpu" / "h200_llamacpp"


def trim(src: Path, dst: Path) -> None:
    lines = src.read_text().splitlines()
    out = [lines[0]]
    for line in lines[1:]:
        tick = json.loads(line)
        report = tick.get("report")
        if report is not None:
            tick["report"] = {"time": report.get("time"), "verdicts": report.get("verdicts")}
        out.append(json.dumps(tick, separators=(",", ":")))
    dst.write_text("\n".join(out) + "\n")


def main(argv: list[str]) -> int:
    results = Path(argv[0])
    DEST.mkdir(parents=True, exist_ok=True)
    for spec in argv[1:]:
        case, _, name = spec.partition("=")
        name = name or case
        trim(results / "recordings" / f"{case}.jsonl", DEST / f"{name}.jsonl")
        shutil.copyfile(results / f"snapshot-{case}.json", DEST / f"snapshot-{name}.json")
        print(f"{case} -> {name}: {(DEST / f'{name}.jsonl').stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
