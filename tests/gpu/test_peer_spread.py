"""bench/gpu/peer_spread.py on a peer run's work folder written here: which GuideLLM medians
lie inside headroom's own bootstrap spread, over the window both clients held only."""

from __future__ import annotations

import importlib.util
import json
import random
from pathlib import Path

PATH = Path(__file__).resolve().parents[2] / "bench" / "gpu" / "peer_spread.py"
spec = importlib.util.spec_from_file_location("peer_spread", PATH)
assert spec is not None and spec.loader is not None
ps = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ps)


def _work(tmp_path: Path, gl_ttft_s: float) -> Path:
    rng = random.Random(7)
    run = tmp_path / "r1" / "headroom-4.0"
    run.mkdir(parents=True)
    lines = ['{"k": "ready", "workers": 1, "t": 0.0}']
    # 80 requests inside the shared window (100-120 s), TTFT 40-60 ms; 20 outside it at 1 s,
    # which a median over every request would be pulled up by.
    for i in range(80):
        r = {"k": "r", "t0": 100.0 + i * 0.25, "ttft": 0.04 + 0.02 * rng.random()}
        lines.append(json.dumps(r, separators=(",", ":")))
    for i in range(20):
        lines.append(json.dumps({"k": "r", "t0": 130.0 + i, "ttft": 1.0}, separators=(",", ":")))
    (run / "requests.jsonl").write_text("\n".join(lines) + "\n")
    row = {
        "load": 4.0, "round": 1,
        "headroom": {"window": [100.0, 120.0], "records": str(run / "requests.jsonl")},
        "guidellm": {"ttft_p50_s": gl_ttft_s, "own": {"requests": 90, "window": [95.0, 125.0]}},
    }  # fmt: skip
    (tmp_path / "peer.json").write_text(json.dumps([row]))
    return tmp_path


def test_a_median_inside_the_spread_and_one_outside(tmp_path: Path, capsys) -> None:
    assert ps.main([str(_work(tmp_path / "a", 0.050))]) == 0
    inside = capsys.readouterr().out
    assert "inside" in inside and "outside" not in inside
    # Only the window's 80 requests count: 4.00 req/s sent; GuideLLM's over its own window.
    assert "sent hr 4.00 / gl 3.00 req/s" in inside
    assert ps.main([str(_work(tmp_path / "b", 0.080))]) == 0
    assert "outside" in capsys.readouterr().out


def test_the_interval_holds_the_median_and_narrows_with_more_samples() -> None:
    rng = random.Random(3)
    few = [rng.random() for _ in range(30)]
    many = [rng.random() for _ in range(3000)]
    lo, hi = ps.p50_interval(few)
    assert lo < sorted(few)[15] < hi
    lo2, hi2 = ps.p50_interval(many)
    assert hi2 - lo2 < (hi - lo) / 3
