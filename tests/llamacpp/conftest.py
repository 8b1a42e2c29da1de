"""Fixtures for the real llama.cpp tests (marker ``llamacpp``).

`llama-server` is built from llama.cpp's sources (deploy/llamacpp/setup.sh, about 5 to 10
minutes on 2 cores, then cached) and serves a tiny random GGUF. If it cannot be built
these tests skip with the reason; under CI (CI=true) they fail instead, unless
HEADROOM_ALLOW_LLAMACPP_SKIP=1.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from llamacpp_support import SLOTS, gauges, serve, skip_or_fail


@pytest.fixture(scope="session")
def _llama_server() -> Iterator[Any]:
    try:
        serve.ensure_binary()
        serve.ensure_model()
    except serve.LlamaSetupError as exc:
        skip_or_fail(f"llama.cpp cannot be built here: {exc}")
    server = serve.LlamaServer(parallel=SLOTS)
    server.start()  # a server that will not start is a failure, never a skip
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def llama_server(_llama_server: Any) -> Any:
    """The --parallel 4 server, idle (whatever an earlier test left has drained)."""
    deadline = time.monotonic() + 60
    while True:
        g = gauges(_llama_server.url)
        if not g.get("llamacpp:requests_processing") and not g.get("llamacpp:requests_deferred"):
            return _llama_server
        assert time.monotonic() < deadline, f"llama-server did not drain: {g}"
        time.sleep(0.5)
