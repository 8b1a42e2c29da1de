"""Each way a profile cannot be taken is one line on stderr and exit 1, never a traceback.

These run `headroom snapshot --profile --pid P` as a user would, against processes made
to fail in each way: not Python, gone, another user's (no ptrace permission), and a PID
from outside the PID namespace headroom runs in.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

BURN = "import time\nwhile True:\n    sum(range(10000))\n"


def headroom_profile(pid: int, prefix: list[str] | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "headroom", "snapshot", "--no-nvml", "--profile", "--pid",
           str(pid), "--window", "1"]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    return subprocess.run(
        (prefix or []) + cmd, capture_output=True, text=True, timeout=120, env=env
    )


def assert_one_line(proc: subprocess.CompletedProcess, *words: str) -> str:
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith("headroom snapshot: "), lines[0]
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def python_burner() -> Iterator[subprocess.Popen]:
    p = subprocess.Popen([sys.executable, "-c", BURN])
    proc = psutil.Process(p.pid)
    deadline = time.monotonic() + 30
    # Past the interpreter's start-up: py-spy finds no Python thread in a process still loading.
    while proc.cpu_times().user < 0.3 and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        yield p
    finally:
        p.kill()
        p.wait()


def test_a_process_that_is_not_python() -> None:
    p = subprocess.Popen(["sleep", "60"])
    try:
        assert_one_line(headroom_profile(p.pid), f"process {p.pid}", "is not Python")
    finally:
        p.kill()
        p.wait()


def test_a_process_that_exited() -> None:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    assert_one_line(headroom_profile(p.pid), f"no process {p.pid}", "exited")


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root")
def test_no_ptrace_permission_says_what_to_grant(python_burner: subprocess.Popen) -> None:
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    line = assert_one_line(headroom_profile(python_burner.pid, nobody), "no permission", "ptrace")
    for grant in ("the engine's user", "kernel.yama.ptrace_scope", "CAP_SYS_PTRACE"):
        assert grant in line


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root")
def test_a_pid_from_another_pid_namespace(python_burner: subprocess.Popen) -> None:
    inside = ["unshare", "--pid", "--fork", "--mount-proc"]
    assert_one_line(headroom_profile(python_burner.pid, inside), "another PID namespace", "hostPID")


def test_the_profile_of_a_python_process_is_taken(python_burner: subprocess.Popen) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "headroom", "snapshot", "--no-nvml", "--profile", "--pid",
         str(python_burner.pid), "--window", "2", "--json"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.stdout.startswith("{"), proc.stderr
    report = json.loads(proc.stdout)
    prof = report["cpu_profile"]
    assert prof["pid"] == python_burner.pid and prof["samples"] >= 20
    assert prof["functions"][0]["function"] == "<module>"
    assert prof["functions"][0]["file"] == "<string>"


def test_a_process_that_exits_during_the_profile_still_gives_one_with_a_note(
    tmp_path: Path,
) -> None:
    # The burner ends when told, once py-spy is recording it: a fixed lifetime raced the
    # snapshot's own start on a loaded machine (it was gone before the profile began).
    done = tmp_path / "done"
    p = subprocess.Popen(
        [sys.executable, "-c", "import os, sys, time\nend = time.time() + 120\n"
         "while time.time() < end and not os.path.exists(sys.argv[1]):\n"
         "    sum(range(10000))\n", str(done)]
    )  # fmt: skip
    try:
        snap = subprocess.Popen(
            [sys.executable, "-m", "headroom", "snapshot", "--no-nvml", "--profile", "--pid",
             str(p.pid), "--window", "4", "--json"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and snap.poll() is None:
            spies = [
                c for c in psutil.Process(snap.pid).children(recursive=True)
                if "py-spy" in " ".join(_cmdline(c)) and str(p.pid) in _cmdline(c)
            ]  # fmt: skip
            if spies:
                break
            time.sleep(0.05)
        time.sleep(0.5)  # some samples first
        done.touch()
        stdout, stderr = snap.communicate(timeout=120)
    finally:
        p.kill()
        p.wait()
    proc = subprocess.CompletedProcess(snap.args, snap.returncode, stdout, stderr)
    assert "Traceback" not in proc.stderr
    prof = json.loads(proc.stdout)["cpu_profile"]
    assert prof["samples"] > 0
    assert any("exited during the profile" in n for n in prof["notes"]), prof["notes"]


def _cmdline(p: psutil.Process) -> list[str]:
    try:
        return p.cmdline()
    except psutil.Error:
        return []
