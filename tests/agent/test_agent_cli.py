"""`headroom agent` as a user runs it: one-line errors, clean stops on SIGTERM and SIGINT."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import pytest
from agent_support import REPO, get, wait_until


def run_agent(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "headroom", "agent", *args],
        cwd=REPO,
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        (["--interval", "0"], {}, "headroom agent: --interval: must be > 0"),
        ([], {"HEADROOM_WINDOW": "-3"}, "headroom agent: environment HEADROOM_WINDOW: must be > 0"),
        (["--config", "/nonexistent/agent.yaml"], {}, "headroom agent: config /nonexistent/agent.yaml: cannot read"),
        (["--listen", "nowhere"], {}, "headroom agent: --listen: expected HOST:PORT"),
    ],
)  # fmt: skip
def test_bad_settings_exit_1_with_one_line(
    args: list[str], env: dict[str, str], expected: str
) -> None:
    proc = run_agent(*args, env=env)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert err.strip().startswith(expected), err
    assert len(err.strip().splitlines()) == 1
    assert "Traceback" not in err


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_stops_cleanly_with_one_line_per_event(sig: signal.Signals) -> None:
    proc = run_agent("--listen", "127.0.0.1:0", "--no-nvml", "--interval", "0.2", "--window", "1")
    try:
        line = proc.stderr.readline()  # type: ignore[union-attr]
        match = re.search(r"listening on (http://127\.0\.0\.1:\d+)", line)
        assert match, line
        url = match.group(1)
        wait_until(lambda: get(url + "/healthz").status_code == 200)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0
    lines = (line + err).strip().splitlines()
    assert any(f"received {sig.name}, stopping" in x for x in lines)
    assert lines[-1].endswith("agent stopped")
    assert "Traceback" not in err
    # Every line is one event with a timestamp and a level.
    assert all(re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ (INFO|WARNING) ", x) for x in lines), (
        lines
    )
