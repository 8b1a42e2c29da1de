"""Fixtures every test folder may use: a fixed clock zone, the anyio backend."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest


@pytest.fixture
def utc() -> Iterator[None]:
    """Status lines print local clock time: pin the zone so screenshots do not depend on it."""
    old = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    yield
    if old is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = old
    time.tzset()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# Tests that time things in real time or load both cores (real engines, sweeps, the
# simulator's pace, the client's own CPU): `make test` runs them one at a time, after the
# rest has run two at a time (pytest-xdist), so that no other test shares the machine with
# them. A file is named here rather than marked in place so that the split is seen whole.
SERIAL = (
    "tests/vllm/",
    "tests/llamacpp/",
    "tests/e2e/",
    "tests/loadgen/test_sweep_",
    "tests/loadgen/test_tune_sim.py",
    "tests/loadgen/test_lg_send_promptly.py",
    "tests/loadgen/test_lg_stream_reader.py",
    "tests/loadgen/test_lg_worker_loop.py",
    "tests/loadgen/test_lg_stall.py",
    "tests/simulator/test_realtime.py",
    "tests/simulator/test_tensor_parallel.py",
    "tests/agent/test_faults.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    root = str(config.rootpath)
    for item in items:
        where = str(item.path)[len(root) + 1 :] if str(item.path).startswith(root) else ""
        if where.startswith(SERIAL):
            item.add_marker(pytest.mark.serial)
