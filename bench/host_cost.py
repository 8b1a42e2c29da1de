"""CPU of one HostSource.read() for engines with many threads: every thread read each
tick, against the hot-thread reads of monitor/sources/thread_cpu.py.

Run from the repository root:  .venv/bin/python bench/host_cost.py [--ranks 4 --threads 88]

The stand-in engine: `--ranks` processes of `--threads` idle threads each (as a
tensor-parallel rank of PyTorch, NCCL and CUDA has) and one thread in each that
burns a quarter of a core (sleeping between bursts, as an engine loop that waits
on the GPU). Each configuration reads them `--reads` times, `--interval` apart
(the agent's tick), in interleaved repeats; CPU is `time.thread_time` around each
read (the source runs in the calling thread). A stall probe runs beside; a repeat
with a stall is left out when clean ones exist. Medians of per-repeat medians.
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import machine  # noqa: E402
from loadgen.stall import StallProbe  # noqa: E402
from monitor.sources import thread_cpu  # noqa: E402
from monitor.sources.host import HostSource  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "host_cost.txt"

RANK = r"""
import sys, threading, time
n = int(sys.argv[1])
stop = threading.Event()
for i in range(n):
    threading.Thread(target=stop.wait, daemon=True).start()
def loop():
    while not stop.is_set():
        end = time.perf_counter() + 0.0025
        while time.perf_counter() < end:
            pass
        time.sleep(0.0075)
threading.Thread(target=loop, daemon=True).start()
print("ready", flush=True)
sys.stdin.readline()
stop.set()
"""


class EveryThreadEveryTick(thread_cpu.ThreadCpuReader):
    """The previous behaviour: a full read of every thread on every tick."""

    def read(self, pid: int, process_cpu: float) -> dict[int, float] | None:
        return thread_cpu.read_all(pid)


def measure(src: HostSource, reads: int, interval: float) -> list[float]:
    out = []
    for _ in range(reads):
        t0 = time.thread_time()
        src.read()
        out.append(time.thread_time() - t0)
        time.sleep(interval)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--threads", type=int, default=88)
    ap.add_argument("--reads", type=int, default=20)
    ap.add_argument("--interval", type=float, default=0.1)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()

    ranks = [
        subprocess.Popen(
            [sys.executable, "-c", RANK, str(args.threads)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(args.ranks)
    ]
    try:
        for r in ranks:
            assert r.stdout is not None and r.stdout.readline().strip() == "ready"
        pids = [r.pid for r in ranks]
        configs = {"every thread, every tick": True, "hot threads (now)": False}
        rows: dict[str, list[tuple[float, bool]]] = {c: [] for c in configs}
        reads: dict[str, float] = {}
        with StallProbe() as probe:
            for _ in range(args.repeats):
                for label, old in configs.items():
                    src = HostSource(pids=pids)
                    if old:
                        src._thread_cpu = EveryThreadEveryTick()
                    measure(src, 3, args.interval)  # discovery, first full reads
                    files0 = src._thread_cpu.thread_reads
                    m0 = time.monotonic()
                    cpu = measure(src, args.reads, args.interval)
                    clean = probe.count(m0, time.monotonic()) == 0
                    rows[label].append((statistics.median(cpu), clean))
                    if not old:
                        reads[label] = (src._thread_cpu.thread_reads - files0) / args.reads
        threads = sum(
            len(HostSource(pids=[p]).read().host.processes[0].threads)  # type: ignore[union-attr]
            for p in pids
        )
    finally:
        for r in ranks:
            try:
                assert r.stdin is not None
                r.stdin.write("\n")
                r.stdin.close()
            except (BrokenPipeError, OSError):
                pass
            r.wait(timeout=10)
            if r.stdout is not None:
                r.stdout.close()

    lines = [
        "HostSource.read() CPU: every thread read each tick vs hot threads only",
        f"date: {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC",
        f"machine: {machine.describe()}",
        f"engine: {args.ranks} processes x ({args.threads} idle threads + 1 thread burning "
        f"~25% of a core) = {threads} threads watched",
        f"method: {args.reads} reads {args.interval:g} s apart per repeat, {args.repeats} "
        "interleaved repeats, thread CPU per read, median of per-repeat medians; "
        f"stall probe: {len(probe.recorded())} stalls, repeats with one left out",
        "",
        f"{'configuration':<28} {'ms CPU/read':>11} {'schedstat files/read':>21} {'clean':>6}",
    ]
    for label, vals in rows.items():
        use = [v for v, ok in vals if ok] or [v for v, _ in vals]
        files = f"{reads[label]:.1f}" if label in reads else str(threads)
        lines.append(
            f"{label:<28} {1e3 * statistics.median(use):>11.3f} {files:>21} "
            f"{f'{sum(ok for _, ok in vals)}/{len(vals)}':>6}"
        )
    machine.write_results(args.out, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
