"""Hot threads read every tick, cold ones only when the process's CPU says they ran.

A stand-in engine with 60 idle threads and one that starts burning when told: between
full reads the source reads a handful of files, not 60, and no thread's figure is ever
more than the stale budget behind what its schedstat says.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import psutil
import pytest

from monitor.sources import thread_cpu
from monitor.sources.host import HostSource

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="schedstat")

ENGINE = r"""
import sys, threading, time
stop = threading.Event()
for i in range(60):
    threading.Thread(target=stop.wait, name=f"idle-{i}", daemon=True).start()
go = threading.Event()
def late():
    with open(f"/proc/self/task/{threading.get_native_id()}/comm", "w") as fh:
        fh.write("hr-late")
    go.wait()
    end = time.monotonic() + 20
    while time.monotonic() < end and not stop.is_set():
        pass
threading.Thread(target=late, daemon=True).start()
print("ready", flush=True)
sys.stdin.readline()
go.set()
sys.stdin.readline()
stop.set()
"""


@pytest.fixture
def engine() -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(
        [sys.executable, "-c", ENGINE], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        yield proc
    finally:
        proc.kill()
        proc.wait(timeout=10)
        for f in (proc.stdin, proc.stdout):
            if f is not None:
                f.close()


def truth(pid: int) -> dict[int, float]:
    threads = thread_cpu.read_all(pid)
    assert threads is not None
    return threads


def reported(src: HostSource) -> dict[int, float]:
    (proc,) = src.read().host.processes  # type: ignore[union-attr]
    return {t.tid: t.cpu_seconds for t in proc.threads}


def late_tid(pid: int) -> int:
    return next(t.id for t in psutil.Process(pid).threads() if _comm(pid, t.id) == "hr-late")


def _comm(pid: int, tid: int) -> str:
    with open(f"/proc/{pid}/task/{tid}/comm") as fh:
        return fh.read().strip()


def test_cold_threads_are_not_read_until_the_process_says_they_ran(
    engine: subprocess.Popen[str],
) -> None:
    pid = engine.pid
    src = HostSource(pids=[pid])
    reader = src._thread_cpu
    first = reported(src)
    assert len(first) >= 62  # main, 60 idle, the late one
    time.sleep(0.2)
    reported(src)  # the second full read: now each thread has a rate
    assert reader.full_reads == 2
    before = reader.thread_reads
    time.sleep(0.2)
    quiet = reported(src)
    assert reader.full_reads == 2, "nothing burned: no full read"
    assert reader.thread_reads - before <= 5, "only the hot threads are read"
    assert set(quiet) == set(first), "cold threads are still reported"

    # The late thread wakes and burns: the process's CPU outruns the hot threads', and
    # the next read is a full one that catches it.
    tid = late_tid(pid)
    assert engine.stdin is not None
    engine.stdin.write("go\n")
    engine.stdin.flush()
    time.sleep(0.3)
    lo = truth(pid)[tid]
    burning = reported(src)
    assert lo > 0.1 and burning[tid] >= lo
    assert reader.full_reads == 3
    # From now on it is hot: read every tick without a full read, never behind.
    for _ in range(3):
        time.sleep(0.15)
        lo = truth(pid)
        figures = reported(src)
        for t, cpu in figures.items():
            if t in lo:
                assert cpu >= lo[t] - thread_cpu.STALE_CPU_S - 0.02, (t, cpu, lo[t])
        assert figures[tid] >= lo[tid]
    assert reader.full_reads == 3

    # The hot thread ends: it leaves the report.
    engine.stdin.write("stop\n")
    engine.stdin.flush()
    deadline = time.monotonic() + 5
    while tid in truth(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert tid not in reported(src)


def test_a_full_read_comes_round_again_for_new_threads(
    engine: subprocess.Popen[str],
) -> None:
    now = [0.0]
    src = HostSource(pids=[engine.pid], clock=lambda: now[0])
    reader = src._thread_cpu
    for step in (0.0, 1.0, 2.0):
        now[0] = step
        reported(src)
    assert reader.full_reads == 2
    now[0] = 1.0 + thread_cpu.FULL_EVERY_S
    reported(src)
    assert reader.full_reads == 3
