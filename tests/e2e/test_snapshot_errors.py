"""`headroom snapshot` against an endpoint that is down: the reason on stderr, whatever the format."""

from __future__ import annotations

import socket

import pytest

from headroom.cli import main


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("fmt", [[], ["--json"]], ids=["text", "json"])
def test_a_refused_connection_is_named_on_stderr(capsys, fmt: list[str]) -> None:
    port = _closed_port()
    rc = main(["snapshot", "--vllm", f"http://127.0.0.1:{port}", "--no-nvml", "--no-host",
               "--window", "0.5", *fmt])  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 1
    last = err.strip().splitlines()[-1]
    assert last.startswith("headroom snapshot: no GPU or engine source produced data (")
    assert "connection refused" in last and f":{port}/metrics" in last
    assert "Traceback" not in err
