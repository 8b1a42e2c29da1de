"""The worker's stream reader: its C path reads what the Python one does, and gathered reads
keep every token's arrival time.

Each case runs tests/loadgen/reader_run.py in a child process (gevent's hub lives there):
a server thread writes a scripted SSE response to a loopback connection, one piece a read,
and the worker's StreamReader reads it as it reads a response body.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

RUN = Path(__file__).with_name("reader_run.py")
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SO_TIMESTAMPNS")
SAME = ("token_events", "gaps", "completion_tokens", "prompt_tokens", "done", "error",
        "parser_error", "nbytes", "first_kernel", "released")  # fmt: skip


def _read(scenario: str, path: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, str(RUN), scenario, path], capture_output=True,
                         text=True, timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _native() -> None:
    try:
        from loadgen import _hotread  # noqa: F401
    except ImportError:
        pytest.skip("loadgen._hotread is not built here (no C compiler at install)")


@linux_only
@pytest.mark.parametrize("scenario", ["full", "closed"])
def test_the_c_reader_finds_what_python_finds(scenario: str) -> None:
    _native()
    c, py = _read(scenario, "c"), _read(scenario, "python")
    assert c["native"] and not py["native"]
    assert {k: c[k] for k in SAME} == {k: py[k] for k in SAME}
    # Every token counted, every gap between them, the stream's timeline whole.
    assert c["token_events"] == c["expected_tokens"]
    assert c["gaps"] == c["token_events"] - 1
    assert c["gaps_sum"] == pytest.approx(c["span"], abs=1e-6)
    assert c["first_kernel"] is True
    if scenario == "full":
        assert (c["done"], c["error"], c["released"]) == (True, None, True)
        assert c["completion_tokens"] == c["expected_tokens"]
    else:
        assert c["error"] == "connection closed mid-stream" and not c["done"]
    # The C path took the plain tokens itself: Python saw only the reads of other shapes
    # (the first token, a quote, an empty text, two chunks, a split chunk, the end).
    assert c["slow_calls"] <= 12 < c["token_events"]
    assert not c["hot_left"]


@linux_only
@pytest.mark.parametrize("path", ["c", "python"])
def test_each_token_is_timed_when_it_arrived(path: str) -> None:
    if path == "c":
        _native()
    run = _read("closed", path)
    late = [t - before for t, (before, _after) in zip(run["token_times"], run["sent"])]
    assert len(late) == 41
    # Loopback delivers inside the send call; the kernel's stamp is that moment.
    assert statistics.median(late) < 0.0005
    assert sum(1 for x in late if -0.0002 < x < 0.001) >= 0.9 * len(late)


@linux_only
def test_gathered_reads_come_late_and_still_time_each_token_at_its_arrival() -> None:
    _native()
    run = _read("closed", "collect")
    assert run["collect_setter"], "gevent's libev loop should take an io collect interval"
    # libev slept before polling: each piece was read about a millisecond after it came...
    assert statistics.median(run["taken"]) > 0.0005
    late = [t - before for t, (before, _after) in zip(run["token_times"], run["sent"])]
    # ...and each token still carries the moment it reached the socket.
    assert statistics.median(late) < 0.0005
    assert sum(1 for x in late if -0.0002 < x < 0.001) >= 0.9 * len(late)
    assert run["token_events"] == run["expected_tokens"]


@linux_only
def test_the_hub_gathers_only_while_a_round_of_tokens_is_incomplete() -> None:
    # An engine's step brings every running stream a token. Until each has had its own, the
    # rest are on their way: the hub sleeps before polling to take them in one wake-up. Once
    # each has, the next is a step away: a sleep would only wake it once more.
    _native()
    out = subprocess.run([sys.executable, str(RUN.with_name("rounds_run.py"))],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    run = json.loads(out.stdout.strip().splitlines()[-1])
    interval = run["notes"][0]["interval"]
    assert interval > 0  # sixteen stamped streams: the policy gathers
    applied = [(n["note"], n["applied"]) for n in run["notes"]]
    halves = [("half the streams", interval), ("the other half", 0.0)] * 3
    assert applied == [
        ("first tokens, every stream", 0.0),
        *halves,
        ("one stream", interval),
        ("the same stream again", interval),  # read twice: a new round began
    ]
    # Each stream's tokens all counted: the first has two more than the rest.
    assert run["tokens"] == [6] + [4] * (len(run["tokens"]) - 1)
    # Every stream let go: nothing left counted, no interval left set.
    assert (run["after"]["live"], run["after"]["applied"]) == (0, 0.0)


PLAIN_OR_TLS = """
import socket, ssl, sys
sys.path.insert(0, sys.argv[1])
import gevent.socket, gevent.ssl
from loadgen.worker_reader import plain_socket
plain = gevent.socket.socket(socket.AF_INET, socket.SOCK_STREAM)
tls = gevent.ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).wrap_socket(
    gevent.socket.socket(socket.AF_INET, socket.SOCK_STREAM), server_hostname="x",
    do_handshake_on_connect=False)
unix = gevent.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
print(plain_socket(plain) is plain._sock, plain_socket(tls), plain_socket(unix), plain_socket(None))
"""


def test_only_plain_tcp_sockets_are_read_by_the_hub() -> None:
    # TLS bytes are decrypted where epoll cannot see them: such a stream keeps its greenlet.
    out = subprocess.run([sys.executable, "-c", PLAIN_OR_TLS, str(RUN.parents[2])],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["True", "None", "None", "None"]
