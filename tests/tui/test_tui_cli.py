"""`headroom watch` and `headroom demo` refuse bad input in one line, with exit 1."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from headroom.cli import main


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["watch", "--interval", "0"], "--interval must be positive"),
        (["watch", "--replay", "x.jsonl", "--speed", "-1"], "--speed must be 0"),
        (["watch", "--remote", "http://127.0.0.1:1", "--vllm", "http://x"], "local sampling only"),
        (["watch", "--remote", "http://127.0.0.1:1", "--replay", "x"], "exclude each other"),
        (["demo", "--scenario", "nope"], "unknown scenario 'nope'"),
    ],
)
def test_bad_flags_are_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_replaying_a_missing_or_broken_file_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text("garbage\n{}\n")
    for path, message in (
        (tmp_path / "missing.jsonl", "cannot read recording"),
        (bad, "bad.jsonl:1"),
    ):
        out = subprocess.run(
            [sys.executable, "-m", "headroom", "watch", "--replay", str(path)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 1
        assert message in out.stderr and "Traceback" not in out.stderr
