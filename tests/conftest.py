"""Fixtures every test folder may use (a fixed clock zone, the anyio backend) and the serial mark."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest
from run_alone import SERIAL


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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    root = str(config.rootpath)
    for item in items:
        where = str(item.path)[len(root) + 1 :] if str(item.path).startswith(root) else ""
        if where.startswith(SERIAL):
            item.add_marker(pytest.mark.serial)
