"""What `headroom watch` costs on screen: CPU and bytes written to a 120x40 terminal.

Runs the TUI in a pseudo-terminal of 120x40 for ``--seconds`` (start-up excluded: the
count starts after ``--warmup``), reads everything it writes, and reports its process
tree's CPU (utime+stime) and the bytes written. ``--with-nvitop`` then runs nvitop the
same way (same seconds, same size, one after the other) and prints the ratios against the
goals (bytes at most twice nvitop's, CPU at most nvitop's); without nvitop importable that
leg is skipped with a line that says so. ``--cmd`` runs something else instead of headroom
watch; ``--cwd`` runs headroom from another checkout.

    python bench/tui_cost.py --seconds 60 -- --vllm http://127.0.0.1:8000 --no-nvml
    python bench/tui_cost.py --seconds 60 --with-nvitop -- --no-gpm
"""

from __future__ import annotations

import argparse
import fcntl
import os
import pty
import re
import select
import shlex
import signal
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.machine import tree_cpu  # noqa: E402


class Exited(Exception):
    """The command ended before the measurement did (it printed ``tail`` last)."""

    def __init__(self, tail: str) -> None:
        super().__init__(tail)
        self.tail = tail


def measure(
    argv: list[str], cwd: Path, seconds: float, warmup: float, rows: RowBytes | None = None
) -> tuple[float, int]:
    """(share of a core, bytes written) over ``seconds`` after ``warmup``; Exited if the
    command ends first."""
    pid, fd = pty.fork()
    if pid == 0:
        os.chdir(cwd)
        env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "120", "LINES": "40",
               "PYTHONPATH": os.pathsep.join([str(cwd), os.environ.get("PYTHONPATH", "")])}  # fmt: skip
        os.execvpe(argv[0], argv, env)
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    proc = psutil.Process(pid)
    written = 0
    c0 = None
    last = b""  # what it wrote last, to say why it ended early
    t_end = time.monotonic() + warmup + seconds
    t_warm = time.monotonic() + warmup
    ended = False
    while time.monotonic() < t_end:
        if c0 is None and time.monotonic() >= t_warm:
            c0, written = tree_cpu(proc), 0
        r, _, _ = select.select([fd], [], [], 0.2)
        if r:
            try:
                data = os.read(fd, 65536)
            except OSError:
                ended = True  # the terminal's other end closed: the command exited
                break
            if not data:
                ended = True
                break
            written += len(data)
            last = (last + data)[-2000:]
            if rows is not None and c0 is not None:
                rows.add(data)
    cpu = tree_cpu(proc) - (c0 or 0.0)
    try:
        for q in proc.children(recursive=True):
            q.kill()
        os.kill(pid, signal.SIGKILL)
    except (psutil.Error, ProcessLookupError):
        pass
    os.waitpid(pid, 0)
    os.close(fd)
    if ended:
        raise Exited(_plain(last))
    return cpu / seconds, written


def _plain(data: bytes) -> str:
    """The last lines of text in terminal output, escape sequences taken out."""
    text = re.sub(
        r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\x1b.", "", data.decode(errors="replace")
    )
    lines = [line.strip() for line in text.replace("\r", "\n").splitlines() if line.strip()]
    return " / ".join(lines[-2:]) if lines else "(nothing printed)"


_MOVE = re.compile(rb"\x1b\[(\d+);(\d+)H")


class RowBytes:
    """The bytes written on each screen row: Textual moves the cursor before each run of
    cells it repaints, so the bytes between two moves belong to the first one's row."""

    def __init__(self, rows: int) -> None:
        self.rows = [0] * rows
        self.row = 0

    def add(self, data: bytes) -> None:
        at = 0
        for m in _MOVE.finditer(data):
            self.rows[self.row] += m.start() - at
            self.row = min(len(self.rows) - 1, max(0, int(m.group(1)) - 1))
            at = m.start()
        self.rows[self.row] += len(data) - at


def leg(
    argv: list[str], label: str, args: argparse.Namespace, rows: RowBytes | None
) -> tuple[float, int] | None:
    """Measure one command and print its line (and its rows); None where it ended early."""
    try:
        share, written = measure(argv, args.cwd.resolve(), args.seconds, args.warmup, rows)
    except Exited as exc:
        print(f"{label}: ended before the measurement did, skipped (it said: {exc.tail})")
        return None
    print(f"{label}: {100 * share:.2f}% of a core, {written / 1024:.0f} KiB written in "
          f"{args.seconds:g} s at 120x40")  # fmt: skip
    if rows is not None:
        print(
            "bytes per row (1-based):",
            ", ".join(f"{y + 1}:{n}" for y, n in enumerate(rows.rows) if n),
        )
    return share, written


def nvitop_missing(python: str) -> str | None:
    """Why nvitop cannot run under ``python``, or None when it imports."""
    env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    done = subprocess.run(
        [python, "-c", "import nvitop"], env=env, capture_output=True, text=True, check=False
    )
    if done.returncode == 0:
        return None
    err = done.stderr.strip().splitlines()
    return err[-1] if err else f"exit status {done.returncode}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--warmup", type=float, default=8.0)
    ap.add_argument("--cwd", type=Path, default=ROOT)
    ap.add_argument("--cmd", help="run this instead of headroom watch (e.g. nvitop)")
    ap.add_argument(
        "--with-nvitop",
        action="store_true",
        help="then run nvitop the same way and print the ratios against the goals",
    )
    ap.add_argument(
        "--nvitop-cmd",
        default=f"{sys.executable} -m nvitop",
        help="how to run nvitop (default: this Python's -m nvitop)",
    )
    ap.add_argument("--rows", action="store_true", help="also print the bytes per screen row")
    ap.add_argument("rest", nargs="*", help="headroom watch's arguments (after --)")
    args = ap.parse_args()
    argv = (
        shlex.split(args.cmd)
        if args.cmd
        else [sys.executable, "-m", "headroom", "watch", *args.rest]
    )
    where = "" if args.cwd.resolve() == ROOT else f" (from the checkout {args.cwd.name})"
    label = " ".join(argv if args.cmd else argv[1:]) + where
    ours = leg(argv, label, args, RowBytes(40) if args.rows else None)
    if not args.with_nvitop:
        return
    nv = shlex.split(args.nvitop_cmd)
    why = nvitop_missing(nv[0]) if nv[1:3] == ["-m", "nvitop"] else None
    if why is not None:
        print(f"nvitop: not run, it does not import here ({why}); install it (pip install nvitop)")
        return
    theirs = leg(nv, " ".join(nv if args.cmd else nv[1:]), args, None)
    if ours is None or theirs is None:
        return
    cpu_x = ours[0] / theirs[0] if theirs[0] > 0 else float("inf")
    bytes_x = ours[1] / theirs[1] if theirs[1] > 0 else float("inf")
    print(
        f"headroom watch / nvitop: bytes {bytes_x:.2f}x (goal at most 2x: "
        f"{'met' if bytes_x <= 2 else 'NOT met'}), CPU {cpu_x:.2f}x (goal at most 1x: "
        f"{'met' if cpu_x <= 1 else 'NOT met'}); one after the other, {args.seconds:g} s each "
        f"after {args.warmup:g} s, 120x40"
    )


if __name__ == "__main__":
    main()
