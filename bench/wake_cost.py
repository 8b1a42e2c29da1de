"""What the same small work costs right after a 1 s sleep and right after a 1 ms one.

An agent ticking once a second sleeps between ticks; on the VMs here the memory its work
touches is no longer in the CPU's caches when it wakes (other guests, the hypervisor's
flushes), so each tick's work costs several times what it costs run again at once. That
is what makes a few ticks' parsing, window and diagnosis done together cheaper than each
tick's alone (monitor.read.sampler's digest_every_s). Thread CPU (time.thread_time), median.

    python bench/wake_cost.py > bench/results/wake_cost.txt
"""

from __future__ import annotations

import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from monitor.sources import vllm  # noqa: E402

PAGE = (ROOT / "tests/fixtures/vllm-0.32.0-cpu-metrics-under-load.txt").read_text()


def cost(work: Callable[[], object], sleep_s: float, n: int) -> float:
    spent = []
    for _ in range(n):
        time.sleep(sleep_s)
        t = time.thread_time()
        work()
        spent.append(time.thread_time() - t)
    return statistics.median(spent) * 1e6


def main() -> None:
    stat = os.open("/proc/stat", os.O_RDONLY)
    numbers = list(range(1000))
    memo = vllm.PageMemo()
    vllm.engines_from_text(PAGE, "u", None, memo)
    pages = [PAGE.replace(" 4.0\n", f" {4.0 + i}\n") for i in range(1, 4)]
    turn = [0]

    def parse() -> None:
        turn[0] += 1
        vllm.engines_from_text(pages[turn[0] % 3], "u", None, memo)

    works: list[tuple[str, Callable[[], object]]] = [
        ("nothing", lambda: None),
        ("os.getpid()", os.getpid),
        ("pread /proc/stat", lambda: os.pread(stat, 1 << 16, 0)),
        ("sum of 1,000 ints", lambda: sum(numbers)),
        ("an engine page's parse (vLLM 0.32, by its numbers)", parse),
    ]
    print(f"# wake cost, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
          f"{os.cpu_count()} CPUs, python {platform.python_version()}")  # fmt: skip
    print("# thread CPU of one call, median, after sleeping 1 s / 1 ms before each call")
    print(f"{'work':52s} {'after 1 s':>11s} {'after 1 ms':>11s}  ratio")
    for name, work in works:
        cold, warm = cost(work, 1.0, 9), cost(work, 0.001, 200)
        print(f"{name:52s} {cold:9.1f}us {warm:9.1f}us  {cold / warm:5.1f}x")


if __name__ == "__main__":
    main()
