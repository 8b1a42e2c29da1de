"""Run py-spy on an engine process, never pausing it, and read what it found.

Always ``--nonblocking``: py-spy then reads the target's memory while it runs
instead of stopping it for each sample (stopping a torch process can slow it many
times over, or hang it on ~160 threads: py-spy #872). The price is an odd torn
stack now and then, which a share over hundreds of samples shrugs off.

Every way this can fail becomes a ``ProfileError`` with one line that says what to
do: no permission to read the process (and what to grant), the process gone or in
another PID namespace, a process that is not Python.
"""

from __future__ import annotations

import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from monitor.core.errors import HeadroomError
from monitor.profiling.hot_path import classify
from monitor.profiling.stacks import CpuProfile, ThreadProfile, aggregate, parse

DEFAULT_RATE = 50  # samples a second: 250 over a 5 s window, at ~1% of a core for py-spy

PTRACE_HELP = (
    "run headroom as the engine's user (or root); with kernel.yama.ptrace_scope at 1 or more "
    "only root may, so run as root or set it to 0; in a container grant CAP_SYS_PTRACE "
    "(deploy/: the opt-in profiling settings)"
)


class ProfileError(HeadroomError):
    """A profile that cannot be taken; the message is one line with what to do."""


def pyspy_binary() -> str:
    """$HEADROOM_PYSPY, else py-spy from PATH, else beside this Python (a virtualenv's bin is
    not always on PATH). py-spy is one static binary: a copy carried to a box works there."""
    given = os.environ.get("HEADROOM_PYSPY")
    if given:
        if not os.access(given, os.X_OK):
            raise ProfileError(f"HEADROOM_PYSPY={given} is not an executable file")
        return given
    found = shutil.which("py-spy")
    if found:
        return found
    beside = Path(sys.executable).with_name("py-spy")
    if beside.exists():
        return str(beside)
    raise ProfileError("py-spy is not installed: pip install 'py-spy>=0.4'")


def _ns(pid: int | str) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def check_target(pid: int) -> None:
    """Refuse at once, in one line, what py-spy would fail on: gone, elsewhere, not ours, not Python."""
    if not os.path.exists(f"/proc/{pid}"):
        ours = _ns("self")
        where = f" (this PID namespace is {ours})" if ours else ""
        raise ProfileError(
            f"no process {pid} here{where}: it exited, or it lives in another PID namespace "
            "(a container): give the PID as this namespace sees it, or run headroom in the "
            "engine's namespace (docker --pid=host, Kubernetes hostPID: true)"
        )
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8") as fh:
            status = fh.read()
    except OSError:
        raise ProfileError(f"process {pid} exited") from None
    if "\nState:\tZ" in status:
        raise ProfileError(f"process {pid} exited (a zombie waiting for its parent)")
    try:
        # Opening /proc/PID/mem takes the same ptrace access check py-spy's reads do.
        os.close(os.open(f"/proc/{pid}/mem", os.O_RDONLY))
    except PermissionError:
        raise ProfileError(f"no permission to read process {pid} (ptrace): {PTRACE_HELP}") from None
    except FileNotFoundError:
        raise ProfileError(f"process {pid} exited") from None
    except OSError:
        pass  # an odd /proc: let py-spy say what it finds
    try:
        maps = Path(f"/proc/{pid}/maps").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return
    if "python" not in maps.lower():
        exe = ""
        try:
            exe = os.readlink(f"/proc/{pid}/exe")
        except OSError:
            pass
        raise ProfileError(
            f"process {pid} ({exe or 'unknown program'}) is not Python: py-spy reads Python "
            "stacks only; give the engine's Python process (--pid)"
        )


def explain_failure(pid: int, stderr: str) -> str:
    """py-spy's own error, as one line that says what to do."""
    text = stderr.lower()
    if "permission denied" in text or "operation not permitted" in text or "os error 1)" in text:
        return f"no permission to read process {pid} (ptrace): {PTRACE_HELP}"
    if "failed to find python version" in text or "failed to find a python interpreter" in text:
        return f"process {pid} is not Python (py-spy found no Python interpreter in it)"
    if "no such process" in text or "check that the process is running" in text:
        if _ns(pid) is not None and _ns(pid) != _ns("self"):
            return (
                f"process {pid} lives in another PID namespace and py-spy cannot follow it "
                "there: run headroom in the engine's namespace"
            )
        return f"process {pid} exited"
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip() and "py-spy>" not in ln]
    first = next((ln for ln in lines if ln.lower().startswith("error")), lines[0] if lines else "")
    return f"py-spy failed on process {pid}: {first or 'no output'}"


@dataclass
class Recording:
    """A py-spy run in progress; ``finish`` waits for it and returns its raw stacks."""

    pid: int
    seconds: float
    rate: int
    proc: subprocess.Popen[str]
    out: Path
    started: float
    notes: list[str] = field(default_factory=list)

    def finish(self, grace_s: float = 15.0) -> str:
        try:
            stdout, stderr = self.proc.communicate(timeout=self.seconds + grace_s)
        except subprocess.TimeoutExpired:
            # py-spy writes what it has on SIGINT, as on Ctrl-C.
            self.proc.send_signal(signal.SIGINT)
            try:
                stdout, stderr = self.proc.communicate(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.communicate()
                raise ProfileError(f"py-spy did not finish on process {self.pid}") from None
        try:
            raw = self.out.read_text(encoding="utf-8", errors="replace")
        except OSError:
            raw = ""
        finally:
            self.out.unlink(missing_ok=True)
        if self.proc.returncode != 0 or (not raw and "Samples: 0" not in (stderr or "")):
            raise ProfileError(explain_failure(self.pid, stderr or ""))
        if "process exited" in f"{stdout}{stderr}".lower():
            self.notes.append(f"process {self.pid} exited during the profile: it covers less time")
        return raw

    def cancel(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()
        self.out.unlink(missing_ok=True)


def _lowest_priority() -> None:
    # py-spy must never take a core from the engine it watches: on a box whose cores the
    # engine fills (vLLM's processes busy-poll each other), a sampler at normal priority
    # took tokens/s from a 2-core box for ~7% of a core of its own (bench/profile_cost.py).
    # At nice 19 it runs in the gaps, and takes fewer samples when there are none.
    os.nice(19)


def start(
    pid: int,
    seconds: float,
    rate: int = DEFAULT_RATE,
    subprocesses: bool = True,
    niceness: bool = True,
) -> Recording:
    """Start sampling ``pid`` (and its children) for ``seconds``; returns at once."""
    if seconds <= 0:
        raise ProfileError("the profile needs a positive number of seconds")
    if not 1 <= rate <= 1000:
        raise ProfileError("the sampling rate must be 1-1000 a second")
    check_target(pid)
    binary = pyspy_binary()
    fd, name = tempfile.mkstemp(prefix="headroom-pyspy-", suffix=".txt")
    os.close(fd)
    cmd = [
        binary, "record", "--pid", str(pid), "--nonblocking", "--threads", "--function",
        "--format", "raw", "--rate", str(int(rate)),
        "--duration", str(max(1, math.ceil(seconds - 1e-9))), "--output", name,
    ]  # fmt: skip
    if subprocesses:
        cmd.append("--subprocesses")
    proc = subprocess.Popen(
        cmd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,  # py-spy says "process exited" here, errors on stderr
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_lowest_priority if niceness else None,
    )
    return Recording(pid, seconds, int(rate), proc, Path(name), time.monotonic())


def _comm(pid: int, tid: int) -> str:
    try:
        return Path(f"/proc/{pid}/task/{tid}/comm").read_text(encoding="utf-8").strip()
    except OSError:
        return ""


def build_profile(
    raw: str,
    pid: int,
    seconds: float,
    rate: int,
    want_tid: int | None = None,
    thread_name: str = "",
    notes_in: tuple[str, ...] = (),
) -> CpuProfile:
    """The profile of the wanted thread (else the one with the most samples), others beside it."""
    threads = aggregate(parse(raw), classify)
    if not threads:
        raise ProfileError(
            f"py-spy caught no running Python thread in process {pid} in {seconds:g} s: "
            "it was idle, or busy outside Python"
        )
    main: ThreadProfile = threads[0]
    if want_tid is not None:
        main = next((t for t in threads if t.tid == want_tid), main)
    notes: tuple[str, ...] = tuple(notes_in)
    if want_tid is not None and main.tid != want_tid:
        notes += (
            f"thread {want_tid} (the window's busiest) was not sampled: it lives in another "
            "process or ran no Python; showing the busiest thread that was",
        )
    owner = main.pid if main.pid >= 0 else pid
    if not (thread_name and main.tid == want_tid):
        # The OS name (VLLM::Worker, set by the engine) says more than Python's MainThread.
        thread_name = _comm(owner, main.tid) or main.thread
    return CpuProfile(
        pid=main.pid if main.pid >= 0 else pid,
        tid=main.tid,
        thread=thread_name,
        samples=main.samples,
        seconds=seconds,
        rate=rate,
        functions=main.functions,
        inclusive=main.inclusive,
        kinds=main.kinds,
        others=tuple(t for t in threads if t is not main)[:4],
        wall=time.time(),
        notes=notes,
    )


def profile(
    pid: int,
    seconds: float,
    rate: int = DEFAULT_RATE,
    want_tid: int | None = None,
    subprocesses: bool = True,
    thread_name: str = "",
) -> CpuProfile:
    """Sample ``pid`` for ``seconds`` and return the profile; blocks for that long."""
    rec = start(pid, seconds, rate, subprocesses)
    raw = rec.finish()
    return build_profile(raw, pid, seconds, rate, want_tid, thread_name)
