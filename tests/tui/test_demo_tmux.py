"""`headroom demo` in a real terminal (tmux): panels and a cause soon after start, the scenario key, q."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from monitor.tui.fmt import CAUSE_WORDS

ROOT = Path(__file__).resolve().parents[2]
HEADROOM = Path(sys.executable).parent / "headroom"
# The issue asks for a cause within 10 s (measured here: 2-3 s idle, 13-14 s at load average 12 on
# 2 cores, most of it Python start-up); the machine also stalls for seconds, so allow margin.
CAUSE_DEADLINE_S = 30.0

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


class Tmux:
    def __init__(self, socket: str) -> None:
        self.socket = socket

    def __call__(self, *args: str) -> str:
        out = subprocess.run(
            ["tmux", "-L", self.socket, "-f", "/dev/null", *args],
            capture_output=True,
            text=True,
            timeout=20,
        )
        return out.stdout

    def screen(self) -> str:
        return self("capture-pane", "-p", "-t", "demo")

    def wait_for(self, pattern: str, timeout: float) -> tuple[str, float]:
        start = time.monotonic()
        screen = ""
        while time.monotonic() - start < timeout:
            screen = self.screen()
            if re.search(pattern, screen):
                return screen, time.monotonic() - start
            time.sleep(0.25)
        raise AssertionError(f"{pattern!r} not on screen after {timeout:.0f} s:\n{screen}")


@pytest.fixture
def tmux() -> Iterator[Tmux]:
    t = Tmux(f"headroom-test-{os.getpid()}")
    yield t
    t("kill-server")


def test_demo_shows_a_cause_switches_scenario_and_quits(tmux: Tmux) -> None:
    # COLUMNS/LINES, when the test runner's environment has them, would override the pane's
    # size for the app (shutil.get_terminal_size reads them first).
    cmd = (
        f"unset COLUMNS LINES; cd {ROOT} && {HEADROOM} demo --scenario starved;"
        " echo HEADROOM-EXIT=$?; sleep 120"
    )
    # Size the window first, then start the demo in it: a program started with the session
    # can read the server's default 80x24 before the window takes its size.
    tmux("new-session", "-d", "-s", "demo", "-x", "100", "-y", "30", "sh")
    tmux("resize-window", "-t", "demo", "-x", "100", "-y", "30")
    size = tmux("display-message", "-p", "-t", "demo", "#{window_width}x#{window_height}")
    assert size.strip() == "100x30"
    tmux("send-keys", "-t", "demo", cmd, "Enter")
    labels = "|".join(re.escape(label.upper()) for _, label in CAUSE_WORDS.values())
    # The cause, the panels and the status bar's scenario, all on one capture: a capture can
    # catch the terminal part-way through a frame (CI once read the panels under a status
    # line not yet drawn).
    wanted = ["GPU 0 ·", "duty", "SM act", "engine 0 ·", "running", "KV", "scenario starved"]
    screen, took = tmux.wait_for(
        rf"(?s)(?=.*│ ({labels})  )" + "".join(f"(?=.*{re.escape(w)})" for w in wanted),
        CAUSE_DEADLINE_S,
    )
    print(f"cause on screen {took:.1f} s after start")

    shell = psutil.Process(int(tmux("display-message", "-p", "-t", "demo", "#{pane_pid}").strip()))
    demo_tree = shell.children(recursive=True)
    assert any("simulator" in " ".join(p.cmdline()) for p in demo_tree if p.is_running())

    tmux("send-keys", "-t", "demo", "s")
    tmux.wait_for(r"scenario seq-cap", 10)

    tmux("send-keys", "-t", "demo", "q")
    tmux.wait_for(r"HEADROOM-EXIT=0", 20)
    # The simulator went with it.
    _, alive = psutil.wait_procs(demo_tree, timeout=10)
    assert not alive, [p.cmdline() for p in alive]
