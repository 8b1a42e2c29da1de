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


def test_a_dead_source_gets_one_line_and_no_promise_to_look_again(capsys) -> None:
    # With the host source on (the default), the port's listener is looked for: a one-shot
    # command must not say it will look again, nor print an empty report before the line.
    port = _closed_port()
    rc = main(["snapshot", "--vllm", f"http://127.0.0.1:{port}", "--no-nvml", "--window", "0.5"])
    out, err = capsys.readouterr()
    assert rc == 1
    assert out == ""
    assert err.strip().splitlines() == [
        "headroom snapshot: no GPU or engine source produced data (vllm: cannot connect to "
        f"http://127.0.0.1:{port}/metrics: connection refused)"
    ]
    assert "looking again" not in out + err


def test_a_one_shot_json_reading_promises_no_second_look(capsys) -> None:
    port = _closed_port()
    rc = main(["snapshot", "--vllm", f"http://127.0.0.1:{port}", "--no-nvml", "--window", "0.5",
               "--json"])  # fmt: skip
    out, err = capsys.readouterr()
    assert rc == 1
    assert f"no local process listens on TCP port {port}" in out
    assert "looking again" not in out + err


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
