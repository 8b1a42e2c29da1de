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


SRC = ["--no-nvml", "--no-host", "--vllm", "http://127.0.0.1:1"]


@pytest.mark.parametrize(
    ("argv", "env"),
    [
        (["snapshot", "--gpu-hour-price", "-1", *SRC], {}),
        (["snapshot", "--gpu-hour-price", "two", *SRC], {}),
        (["snapshot", *SRC], {"HEADROOM_GPU_HOUR_PRICE": "nan"}),
        (["agent", "--gpu-hour-price", "abc", *SRC], {}),
        (["agent", *SRC], {"HEADROOM_GPU_HOUR_PRICE": "-3"}),
        (["sweep", "--gpu-hour-price", "-1", "--target", "http://127.0.0.1:1", "--out", "x"], {}),
        (["fleet", "--prometheus", "http://127.0.0.1:1", "--gpu-hour-price", "x"], {}),
    ],
    ids=["negative", "word", "env-nan", "agent-word", "agent-env", "sweep", "fleet"],
)
def test_a_bad_gpu_hour_price_is_one_line_and_exit_1(
    capsys, monkeypatch: pytest.MonkeyPatch, argv: list[str], env: dict[str, str]
) -> None:
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    rc = main(argv)
    err = capsys.readouterr().err.strip()
    assert rc == 1
    assert len(err.splitlines()) == 1 and "price per GPU-hour" in err and "Traceback" not in err
