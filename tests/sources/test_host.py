"""Host source against real processes: it finds the engine and its busiest thread."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator

import psutil
import pytest

from monitor.sources.base import Source
from monitor.sources.host import HostSource
from monitor.sources.samples import Snapshot
from monitor.window.full import compute_window
from monitor.window.stats import HostWindow

# A stand-in engine. "serve": listen on a port and start a child that burns CPU
# (vLLM's API server and its engine-core child); "burn": burn CPU in a thread
# named like vLLM's engine loop. Each exits on its own after LIFETIME seconds.
ENGINE = r"""
import os, socket, subprocess, sys, threading, time
mode, lifetime = sys.argv[1], float(sys.argv[2])
deadline = time.monotonic() + lifetime
if mode == "serve":
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    child = subprocess.Popen([sys.executable, "-c", sys.argv[3], "burn", sys.argv[2]])
    print("port", s.getsockname()[1], "child", child.pid, flush=True)
    child.wait(timeout=lifetime + 5)
    sys.exit(0)
def burn():
    with open(f"/proc/self/task/{threading.get_native_id()}/comm", "w") as fh:
        fh.write("hr-burner")
    ready.set()
    while time.monotonic() < deadline:
        pass
ready = threading.Event()
threading.Thread(target=burn, name="hr-burner", daemon=True).start()
ready.wait(10)
print("burning", os.getpid(), flush=True)
while time.monotonic() < deadline:
    time.sleep(0.05)
"""
LIFETIME = 20.0  # an upper bound: the fixture stops them as soon as the test ends


def _stop(pid: int) -> None:
    try:
        psutil.Process(pid).kill()
    except psutil.NoSuchProcess:
        pass


@pytest.fixture
def burner() -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(
        [sys.executable, "-c", ENGINE, "burn", str(LIFETIME)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().split()[0] == "burning"
        yield proc
    finally:
        _stop(proc.pid)
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()


@pytest.fixture
def server() -> Iterator[tuple[int, int, int]]:
    """(server pid, port, burning child pid)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", ENGINE, "serve", str(LIFETIME), ENGINE],
        stdout=subprocess.PIPE,
        text=True,
    )
    child = None
    try:
        assert proc.stdout is not None
        words = proc.stdout.readline().split()
        assert words[0] == "port", words
        port, child = int(words[1]), int(words[3])
        assert proc.stdout.readline().split()[0] == "burning"
        yield proc.pid, port, child
    finally:
        if child is not None:
            _stop(child)
        _stop(proc.pid)
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()


def _window(src: HostSource, gap: float = 1.5, tries: int = 3) -> HostWindow:
    """Two readings ``gap`` apart; on a machine stall (both cores frozen), try again."""
    best: HostWindow | None = None
    for _ in range(tries):
        snaps = []
        for i in range(2):
            if i:
                time.sleep(gap)
            reading = src.read()
            assert reading.errors == ()
            snaps.append(Snapshot(t=time.monotonic(), wall=time.time(), host=reading.host))
        w = compute_window(snaps).host
        assert w is not None
        best = w
        if w.busiest_thread is not None and w.busiest_thread.cpu_ratio > 0.5:
            break
    assert best is not None
    return best


def test_finds_the_engine_by_its_port_and_names_its_busy_child_thread(
    server: tuple[int, int, int],
) -> None:
    server_pid, port, child = server
    src = HostSource(ports=[port])
    assert isinstance(src, Source) and src.name == "host"
    assert src.notes == ()
    assert set(src.tracked_pids) >= {server_pid, child}
    w = _window(src)
    assert w.busiest_thread is not None
    assert w.busiest_thread.name == "hr-burner"
    assert w.busiest_thread.pid == child
    assert w.busiest_thread.cpu_ratio > 0.5
    assert w.engine_cpu_cores is not None and w.engine_cpu_cores > 0.5
    assert w.cpu_busy_ratio is not None and w.cpu_busy_ratio > 0
    assert set(w.pids) >= {server_pid, child}


def test_a_given_pid_is_watched_with_its_threads(burner: subprocess.Popen[str]) -> None:
    src = HostSource(pids=[burner.pid])
    w = _window(src)
    assert w.pids == (burner.pid,)
    assert w.busiest_thread is not None and w.busiest_thread.name == "hr-burner"
    assert w.busiest_thread.cpu_ratio > 0.5
    assert w.engine_cpu_cores is not None and w.engine_cpu_cores > 0.5


def test_an_exited_process_is_dropped_without_an_error(burner: subprocess.Popen[str]) -> None:
    src = HostSource(pids=[burner.pid], rediscover_s=3600)
    assert [p.pid for p in src.read().host.processes] == [burner.pid]
    burner.kill()
    burner.wait(timeout=10)
    reading = src.read()
    assert reading.errors == ()
    assert reading.host is not None and reading.host.processes == ()
    assert reading.host.cpu_total_seconds > 0


def test_a_process_gone_between_reads_does_not_turn_schedstat_off(
    burner: subprocess.Popen[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import monitor.sources.thread_cpu as thread_cpu

    src = HostSource(pids=[burner.pid], rediscover_s=3600)
    assert [p.pid for p in src.read().host.processes] == [burner.pid]  # type: ignore[union-attr]
    # It exits after its CPU time is read and before its threads are listed.
    real = thread_cpu.read_all

    def gone(pid: int, known: dict[int, float] | None = None) -> dict[int, float] | None:
        burner.kill()
        burner.wait(timeout=10)
        return real(pid, known)

    monkeypatch.setattr(thread_cpu, "read_all", gone)
    src._thread_cpu.forget(burner.pid)  # so this read lists the threads afresh
    reading = src.read()
    assert reading.errors == ()
    assert reading.host is not None and reading.host.processes == ()
    assert src._schedstat is True, "one exited process must not cost every later read"


def test_a_missing_pid_or_port_is_a_note_not_a_failure() -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait(timeout=30)
    src = HostSource(pids=[gone.pid], ports=[1])  # port 1: nothing listens on it here
    assert any(f"no process {gone.pid}" in n for n in src.notes)
    assert any("no local process listens on TCP port 1" in n for n in src.notes)
    reading = src.read()
    assert reading.errors == () and reading.host is not None
    assert reading.host.processes == ()
    assert reading.host.cpu_count >= 1
    assert reading.host.cpu_idle_seconds <= reading.host.cpu_total_seconds


def test_processes_are_looked_for_again_only_after_rediscover_s(
    server: tuple[int, int, int],
) -> None:
    server_pid, port, child = server
    now = [0.0]
    # Built while watching another port, then pointed at the engine's.
    src = HostSource(ports=[1], rediscover_s=10.0, clock=lambda: now[0])
    src.ports = (port,)
    now[0] = 9.0
    assert src.read().host.processes == ()  # not yet: the last look was 9 s ago
    now[0] = 10.5
    pids = {p.pid for p in src.read().host.processes}
    assert pids >= {server_pid, child}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc")
def test_thread_cpu_read_from_schedstat_agrees_with_psutil(burner: subprocess.Popen[str]) -> None:
    time.sleep(0.5)  # let the burner thread run up some CPU
    src = HostSource(pids=[burner.pid])
    before = {th.id: th.user_time + th.system_time for th in psutil.Process(burner.pid).threads()}
    (proc,) = src.read().host.processes
    after = {th.id: th.user_time + th.system_time for th in psutil.Process(burner.pid).threads()}
    assert {t.tid for t in proc.threads} == set(before)
    busiest = max(proc.threads, key=lambda t: t.cpu_seconds)
    assert busiest.name == "hr-burner" and busiest.cpu_seconds > 0.2
    # /stat counts 10 ms ticks, schedstat nanoseconds: the same clock, read a moment apart.
    assert before[busiest.tid] - 0.02 <= busiest.cpu_seconds <= after[busiest.tid] + 0.02


def test_without_schedstat_the_threads_come_from_psutil(
    burner: subprocess.Popen[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import monitor.sources.thread_cpu as thread_cpu

    # A kernel without schedstat.
    monkeypatch.setattr(thread_cpu, "read_all", lambda pid, known=None: None)
    src = HostSource(pids=[burner.pid])
    w = _window(src)
    assert src._schedstat is False
    assert w.busiest_thread is not None and w.busiest_thread.name == "hr-burner"
    assert w.busiest_thread.cpu_ratio > 0.5


def _open_fds() -> int:
    # Only descriptors on /proc count: what else the test process holds is not the source's.
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            n += os.readlink(f"/proc/self/fd/{fd}").startswith("/proc/")
        except OSError:  # closed between the listing and the look
            pass
    return n


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux's")
def test_files_held_open_read_what_psutil_reads_and_close_when_the_process_goes(
    burner: subprocess.Popen[str],
) -> None:
    # The source keeps /proc/stat, the process's stat and its hot threads' schedstat
    # open between ticks: the figures must be psutil's, the descriptors must not pile
    # up tick after tick, and they must close when the process goes.
    src = HostSource(pids=[burner.pid], rediscover_s=3600)
    before = _open_fds()
    first = src.read().host
    assert first is not None
    # A thread's schedstat opens once a tick shows it ran: the burner's, a tick or two in
    # (on a loaded machine not always the second). Then nothing more opens.
    for _ in range(5):
        time.sleep(0.02)
        src.read()
    held = _open_fds()
    for _ in range(30):
        host = src.read().host
    assert _open_fds() == held  # no descriptor per tick
    assert held - before <= 2 + len(first.processes[0].threads)
    (proc,) = host.processes  # type: ignore[union-attr]
    want = psutil.Process(burner.pid).cpu_times()
    assert proc.cpu_seconds == pytest.approx(want.user + want.system, abs=0.05)
    assert proc.name == psutil.Process(burner.pid).name()
    t = psutil.cpu_times()
    total = sum(t) - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0)
    assert host.cpu_total_seconds == pytest.approx(total, rel=1e-3)  # type: ignore[union-attr]
    assert host.cpu_idle_seconds == pytest.approx(t.idle + t.iowait, rel=1e-3)  # type: ignore[union-attr]
    burner.kill()
    burner.wait(timeout=10)
    assert src.read().host.processes == ()  # type: ignore[union-attr]
    assert _open_fds() <= before + 1  # /proc/stat only
    src.close()
    assert _open_fds() == before
