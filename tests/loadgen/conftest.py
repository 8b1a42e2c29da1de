from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from proc_support import stop
from sim_sweep import SeqCapSweep, seq_cap_sweep

FAKE = Path(__file__).with_name("fake_openai.py")


@pytest.fixture
def fake_server() -> Iterator[Callable[..., str]]:
    """Start the fake OpenAI server with the given flags; returns its base URL."""
    procs: list[subprocess.Popen[str]] = []

    def start(*flags: str) -> str:
        proc = subprocess.Popen(
            [sys.executable, str(FAKE), *flags],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        procs.append(proc)
        assert proc.stdout is not None
        port = proc.stdout.readline().strip()
        assert port.isdigit(), "fake server did not start"
        return f"http://127.0.0.1:{port}"

    yield start
    for p in procs:
        stop(p, grace=10)
        if p.stdout is not None:
            p.stdout.close()


@pytest.fixture(scope="session")
def seq_cap_sim_sweep(tmp_path_factory: pytest.TempPathFactory) -> SeqCapSweep:
    """One sweep of the simulator's seq-cap box, shared by the tests that read it (read only:
    a test that writes to it copies it first)."""
    return seq_cap_sweep(tmp_path_factory.mktemp("seq-cap-sweep") / "s")
