"""A simulator whose caller dies (closed terminal, killed test) stops by itself."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CALLER = """
import os, sys
sys.path.insert(0, {root!r})
from simulator import start_sim
h = start_sim(scenario="idle", port=0)
print(h.pid, flush=True)
os._exit(0)  # die without stopping the simulator
"""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead too
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def test_simulator_exits_when_its_caller_dies() -> None:
    out = subprocess.run(
        [sys.executable, "-c", CALLER.format(root=str(ROOT))],
        capture_output=True,
        text=True,
        timeout=60,
    )
    pid = int(out.stdout.strip().splitlines()[-1])
    deadline = time.monotonic() + 20  # the watch polls every 0.5 s; room for stalls
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    still = alive(pid)
    if still:
        os.kill(pid, 9)
    assert not still, "the orphaned simulator kept running"
