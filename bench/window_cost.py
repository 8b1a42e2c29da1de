"""What one tick's window costs against the window's length: live against recomputed.

Replays the seq-cap recording (one engine of the simulator with its histograms, a GPU,
the host) as 100 ms ticks, and times, per tick, the live window taking the snapshot
(``LiveWindow.push``), giving its stats (``stats()``, done once a step), and the full
recomputation the Monitor did before (``Sampler.window``) for 10 s, 30 s and 120 s
windows. CPU time (process_time), medians of 5 passes.

    python bench/window_cost.py > bench/results/window_cost.txt
"""

from __future__ import annotations

import dataclasses
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from monitor.read.recording import read_recording  # noqa: E402
from monitor.read.sampler import Sampler  # noqa: E402
from monitor.window.live import LiveWindow  # noqa: E402

TICK_S = 0.1


def readings(n: int) -> list:
    rec = read_recording(ROOT / "tests/fixtures/recordings/seq-cap.jsonl")
    base = [t.snapshot for t in rec.ticks if t.snapshot is not None]
    out = []
    # Stretch the recording to n ticks 100 ms apart; counters keep rising pass after pass.
    for i in range(n):
        s = base[i % len(base)]
        out.append(dataclasses.replace(s, t=1000.0 + i * TICK_S, wall=1.8e9 + i * TICK_S))
    return out


def per_tick(window_s: float, snaps: list, warm: int) -> tuple[float, float, float]:
    live = LiveWindow(window_s)
    sampler = Sampler([], interval=TICK_S, capacity=int(window_s / TICK_S) + 8)
    for s in snaps[:warm]:
        live.push(s)
        sampler.push(s)
    push = stats = full = 0.0
    rest = snaps[warm:]
    for s in rest:
        c = time.process_time()
        live.push(s)
        push += time.process_time() - c
        sampler.push(s)
    c = time.process_time()
    for _ in range(50):
        live.stats()
    stats = (time.process_time() - c) / 50
    c = time.process_time()
    for _ in range(50):
        sampler.window(window_s)
    full = (time.process_time() - c) / 50
    return 1e3 * push / len(rest), 1e3 * stats, 1e3 * full


def main() -> None:
    print(f"# window cost per tick, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
          f"{platform.node()}: {os.cpu_count()} CPUs (shared), python {platform.python_version()}")  # fmt: skip
    print("# command: python bench/window_cost.py; seq-cap recording replayed as 100 ms ticks;")
    print("# ms of CPU, medians of 5 passes; push: every tick; stats: once a step (1 s);")
    print("# recompute: what each tick cost before (Sampler.window over the ring)")
    print(f"{'window':>8} {'ticks in it':>11} {'push ms':>8} {'stats ms':>9} {'recompute ms':>13}")
    for window_s in (10.0, 30.0, 120.0):
        n = int(window_s / TICK_S)
        snaps = readings(n + 600)
        runs = [per_tick(window_s, snaps, n) for _ in range(5)]
        push, stats, full = (statistics.median(r[k] for r in runs) for k in range(3))
        print(f"{window_s:>7g}s {n:>11} {push:>8.3f} {stats:>9.3f} {full:>13.2f}")


if __name__ == "__main__":
    main()
