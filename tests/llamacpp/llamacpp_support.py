"""Helpers for the real llama.cpp tests: the server helper, the CLI, a steady load.

A uniquely named module (not conftest) so that test modules import it unambiguously when
the whole suite is collected in one run.
"""

from __future__ import annotations

import json
import sys
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import engine_support  # noqa: E402
from engine_support import ROOT, headroom, load_serve, snapshot  # noqa: E402, F401

# The --parallel of the shared server: llama.cpp's slots, its sequence cap.
SLOTS = 4


serve = load_serve("llamacpp")


def skip_or_fail(reason: str) -> None:
    """Skip where llama.cpp cannot be built; under CI fail, unless HEADROOM_ALLOW_LLAMACPP_SKIP=1."""
    engine_support.skip_or_fail(reason, "HEADROOM_ALLOW_LLAMACPP_SKIP")


def gauges(url: str) -> dict[str, float]:
    """llama.cpp's two request gauges, read straight from /metrics (not through headroom)."""
    with urllib.request.urlopen(url + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    out = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in ("llamacpp:requests_processing", "llamacpp:requests_deferred"):
            out[name] = float(value)
    return out


def _stream(url: str, max_tokens: int, stop: threading.Event) -> None:
    body = json.dumps(
        {"prompt": "the and of", "max_tokens": max_tokens, "stream": True, "ignore_eos": True}
    ).encode()
    req = urllib.request.Request(
        url + "/v1/completions", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=120) as resp:
        # Stopped: hang up. llama-server cancels a stream whose client has gone, so the load
        # ends now rather than after every queued request's 1,500 tokens (two minutes here).
        while resp.read(4096) and not stop.is_set():
            pass


@contextmanager
def steady_load(url: str, streams: int, max_tokens: int = 1500) -> Iterator[None]:
    """``streams`` clients, each sending one streaming request after another until the end."""
    stop = threading.Event()
    errors: list[BaseException] = []

    def client() -> None:
        while not stop.is_set():
            try:
                _stream(url, max_tokens, stop)
            except BaseException as exc:  # noqa: BLE001 - reported to the test below
                errors.append(exc)
                return

    threads = [threading.Thread(target=client, daemon=True) for _ in range(streams)]
    for t in threads:
        t.start()
    try:
        yield
    finally:
        stop.set()
        # The requests in flight end on their own (max_tokens); wait for them.
        for t in threads:
            t.join(timeout=120)
    assert not errors, errors[:3]
