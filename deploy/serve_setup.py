"""What deploy/llamacpp/serve.py and deploy/vllm-cpu/serve.py share: running their setup.sh,
reading the one line a setup script or model writer answers with, starting the server. Stdlib only, found
beside them (deploy/ is no package: each serve.py puts this folder on sys.path)."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path
from typing import IO, Any


def last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else "no output"


def run_setup(setup_sh: Path, error: type[Exception], what: str, timeout: float) -> Path:
    """Run ``setup_sh`` (instant once it has run) and return the path it prints last.

    ``error`` carries its one-line failure; ``what`` names the work in the timeout message."""
    try:
        proc = subprocess.run(
            ["bash", str(setup_sh)], capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        raise error(f"{what} took longer than {timeout:.0f} s") from None
    if proc.returncode != 0:
        raise error(last_line(proc.stderr or proc.stdout))
    return Path(last_line(proc.stdout))


def spawn(cmd: list[str], log: IO[bytes], **popen: Any) -> subprocess.Popen[bytes]:
    """The server's process: nothing on its stdin, both its output streams into ``log``."""
    return subprocess.Popen(
        cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, **popen
    )


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
