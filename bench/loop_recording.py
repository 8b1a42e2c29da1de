"""A short recording played over and over as one long one, for `headroom watch --replay`.

The H200 recordings in tests/fixtures/gpu/h200 hold ~10 s each; a screen-cost run wants a
minute or more of the same real readings. Each pass is shifted on in time, and the host's
cumulative CPU counters carry on from where the last pass ended (so rates stay as recorded).
The first snapshot (NVML's utilization not read yet) is left out.

    python bench/loop_recording.py tests/fixtures/gpu/h200/matmul-1s.jsonl /tmp/loop.jsonl
"""

from __future__ import annotations

import argparse
import copy
import json
from pathlib import Path
from typing import Any

COUNTERS = ("cpu_total_seconds", "cpu_idle_seconds", "cpu_steal_seconds")


def loop(snaps: list[dict[str, Any]], passes: int) -> list[dict[str, Any]]:
    n = len(snaps)
    first, last = snaps[0], snaps[-1]
    per = n / (n - 1)  # one pass's growth, the step from its last reading to the next included

    def grown(a: float, b: float, k: int) -> float:
        return k * (b - a) * per

    out = []
    for k in range(passes):
        for snap in snaps:
            s = copy.deepcopy(snap)
            s["t"] += k * n * (last["t"] - first["t"]) / (n - 1)
            s["wall"] += k * n * (last["wall"] - first["wall"]) / (n - 1)
            h, h0, h1 = s.get("host") or {}, first.get("host") or {}, last.get("host") or {}
            for key in COUNTERS:
                if isinstance(h.get(key), (int, float)):
                    h[key] += grown(h0[key], h1[key], k)
            for p, p0, p1 in zip(h.get("processes") or (), h0.get("processes") or (), h1.get("processes") or ()):  # fmt: skip
                if p["pid"] == p0["pid"] == p1["pid"]:
                    p["cpu_seconds"] += grown(p0["cpu_seconds"], p1["cpu_seconds"], k)
                    for th, t0, t1 in zip(p.get("threads") or (), p0.get("threads") or (), p1.get("threads") or ()):  # fmt: skip
                        th[2] += grown(t0[2], t1[2], k)
            out.append(s)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("src", type=Path)
    ap.add_argument("dst", type=Path)
    ap.add_argument("--passes", type=int, default=12)
    args = ap.parse_args()
    lines = args.src.read_text().splitlines()
    snaps = [json.loads(line)["snapshot"] for line in lines[1:] if '"snapshot"' in line][1:]
    with args.dst.open("w") as fh:
        fh.write(lines[0] + "\n")
        for s in loop(snaps, args.passes):
            fh.write(json.dumps({"snapshot": s}) + "\n")
    print(f"{args.dst}: {len(snaps)} readings x {args.passes} passes")


if __name__ == "__main__":
    main()
