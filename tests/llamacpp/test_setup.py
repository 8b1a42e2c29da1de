"""deploy/llamacpp/setup.sh as CI and users run it: instant once built, one line on failure."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from llamacpp_support import ROOT

SETUP = ROOT / "deploy" / "llamacpp" / "setup.sh"


def run(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SETUP)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **env},
    )


def test_a_finished_build_is_reused_without_work(tmp_path: Path) -> None:
    build = tmp_path / "llamacpp"
    server = build / "build" / "bin" / "llama-server"
    server.parent.mkdir(parents=True)
    server.write_text("#!/bin/sh\n")
    server.chmod(0o755)
    (build / ".headroom-llamacpp-ok").write_text("llama-cpp-python==0.3.36 llama-server\n")
    # A pip that would fail proves nothing is fetched.
    proc = run({"HEADROOM_LLAMACPP_DIR": str(build), "HEADROOM_LLAMACPP_PIP": "false"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(server)


def test_a_failed_fetch_is_one_line_and_nonzero(tmp_path: Path) -> None:
    build = tmp_path / "llamacpp"
    proc = run({"HEADROOM_LLAMACPP_DIR": str(build), "HEADROOM_LLAMACPP_PIP": "false"})
    assert proc.returncode != 0
    failed = [ln for ln in proc.stderr.splitlines() if ln.startswith("llama.cpp setup failed:")]
    assert len(failed) == 1, proc.stderr
    assert "pip download llama-cpp-python==0.3.36" in failed[0]
    assert f"(log: {build}.build.log)" in failed[0]
    assert proc.stdout == ""
