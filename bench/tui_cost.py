"""What `headroom watch` costs on screen: CPU and bytes written to a 120x40 terminal.

Runs the TUI in a pseudo-terminal of 120x40 for ``--seconds`` (start-up excluded: the
count starts after ``--warmup``), reads everything it writes, and reports its process
tree's CPU (utime+stime) and the bytes written. ``--cmd`` runs something else in the same
terminal (nvitop, for comparison); ``--cwd`` runs headroom from another checkout.

    python bench/tui_cost.py --seconds 60 -- --vllm http://127.0.0.1:8000 --no-nvml
"""

from __future__ import annotations

import argparse
import fcntl
import os
import pty
import re
import select
import signal
import struct
import sys
import termios
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.machine import tree_cpu  # noqa: E402


def measure(
    argv: list[str], cwd: Path, seconds: float, warmup: float, rows: RowBytes | None = None
) -> tuple[float, int]:
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
    t_end = time.monotonic() + warmup + seconds
    t_warm = time.monotonic() + warmup
    while time.monotonic() < t_end:
        if c0 is None and time.monotonic() >= t_warm:
            c0, written = tree_cpu(proc), 0
        r, _, _ = select.select([fd], [], [], 0.2)
        if r:
            try:
                data = os.read(fd, 65536)
            except OSError:
                break
            written += len(data)
            if rows is not None and c0 is not None:
                rows.add(data)
    cpu = tree_cpu(proc) - (c0 or 0.0)
    for q in proc.children(recursive=True):
        q.kill()
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    os.close(fd)
    return cpu / seconds, written


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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--warmup", type=float, default=8.0)
    ap.add_argument("--cwd", type=Path, default=ROOT)
    ap.add_argument("--cmd", help="run this instead of headroom watch (e.g. nvitop)")
    ap.add_argument("--rows", action="store_true", help="also print the bytes per screen row")
    ap.add_argument("rest", nargs="*", help="headroom watch's arguments (after --)")
    args = ap.parse_args()
    argv = args.cmd.split() if args.cmd else [sys.executable, "-m", "headroom", "watch", *args.rest]
    rows = RowBytes(40) if args.rows else None
    share, written = measure(argv, args.cwd.resolve(), args.seconds, args.warmup, rows)
    where = "" if args.cwd.resolve() == ROOT else f" (from the checkout {args.cwd.name})"
    print(f"{' '.join(argv[1:] if not args.cmd else argv)}{where}: "
          f"{100 * share:.2f}% of a core, {written / 1024:.0f} KiB written in {args.seconds:g} s "
          f"at 120x40")  # fmt: skip
    if rows is not None:
        print(
            "bytes per row (1-based):",
            ", ".join(f"{y + 1}:{n}" for y, n in enumerate(rows.rows) if n),
        )


if __name__ == "__main__":
    main()
