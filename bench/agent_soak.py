"""Soak: does the agent's memory stay flat while it samples a simulator and is scraped hard?

Runs `headroom agent` as its own process against the simulator (seq-cap scenario),
scrapes /metrics and /api/v1/snapshot continuously (plus a burst of 50 at once every
30 s), and samples the agent's RSS every 5 s. A stall probe (5 ms sleeps, gaps over
50 ms logged) runs beside it; RSS samples taken right after a stall are flagged.

    .venv/bin/python bench/agent_soak.py --duration 600 > bench/results/agent_soak.txt

Reports RSS medians of the first and last fifths after warm-up, the least-squares
slope in MiB per hour and the RSS series, to read whether memory plateaus (the
allocator warms up for a few minutes) or keeps climbing (a leak of one snapshot
per tick would add tens of MiB per hour).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from loadgen.stall import StallProbe  # noqa: E402


def near_stall(probe: StallProbe, t: float, within: float = 5.0) -> bool:
    """Whether a stall ended within ``within`` seconds of ``t`` (monotonic)."""
    return any(abs(t - (start + lost)) <= within for start, lost in probe.recorded())


def slope_per_hour(points: list[tuple[float, float]]) -> float:
    n = len(points)
    mx = sum(t for t, _ in points) / n
    my = sum(v for _, v in points) / n
    var = sum((t - mx) ** 2 for t, _ in points)
    cov = sum((t - mx) * (v - my) for t, v in points)
    return cov / var * 3600 if var else 0.0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--duration", type=float, default=600.0)
    ap.add_argument("--warmup", type=float, default=30.0)
    args = ap.parse_args()

    from simulator import start_sim

    probe = StallProbe()
    probe.start()
    sim = start_sim(scenario="seq-cap", port=0)
    agent = subprocess.Popen(
        [sys.executable, "-m", "headroom", "agent", "--listen", "127.0.0.1:0", "--no-nvml",
         "--vllm", sim.url, "--dcgm-exporter", sim.gpu_metrics_url, "--interval", "1", "--window", "10"],
        cwd=REPO, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    line = agent.stderr.readline()  # type: ignore[union-attr]
    m = re.search(r"listening on (\S+)", line)
    if not m:
        print(f"agent did not start: {line}", file=sys.stderr)
        return 1
    url = m.group(1)
    proc = psutil.Process(agent.pid)
    stop = threading.Event()
    latencies: list[float] = []
    errors = [0]
    scrapes = [0]

    def scraper(path: str, period: float) -> None:
        with httpx.Client(timeout=30) as client:
            while not stop.is_set():
                t0 = time.monotonic()
                try:
                    r = client.get(url + path)
                    ok = r.status_code == 200
                except httpx.HTTPError:
                    ok = False
                latencies.append(time.monotonic() - t0)
                scrapes[0] += 1
                errors[0] += 0 if ok else 1
                stop.wait(period)

    def burst() -> None:
        while not stop.wait(30):
            with ThreadPoolExecutor(50) as pool:
                for ok in pool.map(
                    lambda _: httpx.get(url + "/metrics", timeout=30).status_code == 200, range(50)
                ):
                    scrapes[0] += 1
                    errors[0] += 0 if ok else 1

    threads = [
        threading.Thread(target=scraper, args=("/metrics", 0.2), daemon=True),
        threading.Thread(target=scraper, args=("/api/v1/snapshot", 1.0), daemon=True),
        threading.Thread(target=burst, daemon=True),
    ]
    for t in threads:
        t.start()
    start = time.monotonic()
    rss: list[tuple[float, float, bool]] = []  # (seconds since start, MiB, after a stall)
    try:
        while time.monotonic() - start < args.duration:
            time.sleep(5)
            now = time.monotonic()
            rss.append((now - start, proc.memory_info().rss / 2**20, near_stall(probe, now)))
    finally:
        stop.set()
        agent.send_signal(signal.SIGTERM)
        try:
            agent.wait(30)
        except subprocess.TimeoutExpired:
            agent.kill()
        sim.stop()
        probe.stop()

    kept = [(t, v) for t, v, stalled in rss if t >= args.warmup and not stalled]
    fifth = max(1, len(kept) // 5)
    first = statistics.median(v for _, v in kept[:fifth])
    last = statistics.median(v for _, v in kept[-fifth:])
    lat = sorted(latencies)
    print(
        f"agent soak: {args.duration:.0f} s, python {sys.version.split()[0]}, {os.cpu_count()} CPUs"
    )
    print(f"agent exit code after SIGTERM: {agent.returncode}")
    print(
        f"scrapes: {scrapes[0]} ({errors[0]} failed); /metrics every 0.2 s, snapshot every 1 s, 50 at once every 30 s"
    )
    print(
        f"scrape latency (sequential scrapers): p50 {1000 * lat[len(lat) // 2]:.1f} ms, p99 {1000 * lat[int(len(lat) * 0.99)]:.1f} ms"
    )
    print(
        f"stalls > 50 ms seen by the probe: {len(probe.recorded())}, longest {probe.worst():.2f} s"
    )
    print(
        f"RSS samples: {len(rss)} every 5 s; {len(rss) - len(kept)} dropped (warm-up {args.warmup:.0f} s or within 5 s of a stall)"
    )
    print(
        f"RSS median first fifth {first:.1f} MiB, last fifth {last:.1f} MiB, change {last - first:+.2f} MiB"
    )
    print(f"RSS least-squares slope: {slope_per_hour(kept):+.2f} MiB/hour")
    print(f"RSS min {min(v for _, v in kept):.1f} MiB, max {max(v for _, v in kept):.1f} MiB")
    print(
        "RSS over time (s, MiB): "
        + ", ".join(f"{t:.0f}:{v:.1f}" for t, v, _ in rss[:: max(1, len(rss) // 20)])
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
