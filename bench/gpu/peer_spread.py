"""How far apart can two clients' TTFT p50 be by chance? headroom's own spread, per peer row.

Reads a peer run's work folder (bench/gpu/peer_llamacpp.py --together, the peer-work tarball
peer_h200.sh returns): for each row of peer.json, headroom's requests started inside the window
both clients held, the bootstrap 95% interval of their TTFT p50, whether GuideLLM's p50 of the
same window lies inside it, and the request rate each client sent.

    python3 bench/gpu/peer_spread.py /tmp/l30/peer
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
from pathlib import Path
from typing import Any


def p50_interval(values: list[float], draws: int = 2000, seed: int = 1) -> tuple[float, float]:
    rng = random.Random(seed)
    meds = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(draws))
    return meds[int(0.025 * draws)], meds[int(0.975 * draws) - 1]


def row_spread(work: Path, row: dict[str, Any]) -> str:
    hr, gl = row.get("headroom"), row.get("guidellm")
    if not hr or not gl:
        return f"load {row['load']} round {row['round']}: a client failed"
    start, end = hr["window"]
    records = Path(hr["records"]).name
    path = work / f"r{row['round']}" / f"headroom-{row['load']}" / records
    ttfts = []
    with path.open() as f:
        for line in f:
            if line.startswith('{"k":"r"'):
                r = json.loads(line)
                if r["ttft"] is not None and start <= r["t0"] <= end:
                    ttfts.append(r["ttft"])
    med = statistics.median(ttfts)
    lo, hi = p50_interval(ttfts)
    g = gl["ttft_p50_s"]
    own = gl.get("own") or {}
    gl_rate = ""
    if own.get("window"):
        gl_rate = f" / gl {own['requests'] / (own['window'][1] - own['window'][0]):.2f}"
    return (
        f"load {row['load']:g} round {row['round']}: hr {med * 1e3:.1f} ms "
        f"[{lo * 1e3:.1f}-{hi * 1e3:.1f}] gl {g * 1e3:.1f} ms "
        f"{'inside' if lo <= g <= hi else 'outside'}; sent hr {len(ttfts) / (end - start):.2f}"
        f"{gl_rate} req/s"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("work", type=Path, help="the peer run's work folder (holds peer.json)")
    a = p.parse_args(argv)
    for row in json.loads((a.work / "peer.json").read_text()):
        print(row_spread(a.work, row))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
