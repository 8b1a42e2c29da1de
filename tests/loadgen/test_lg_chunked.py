"""Chunked bodies are taken apart by the worker itself, in whatever pieces they arrive."""

from __future__ import annotations

import json
import random
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from loadgen.chunked import ChunkedBody, ChunkError

ROOT = Path(__file__).resolve().parents[2]


def _frame(payloads: list[bytes], ext: bool = False, trailers: bytes = b"") -> bytes:
    out = b""
    for p in payloads:
        out += b"%x%s\r\n" % (len(p), b";x=1" if ext else b"") + p + b"\r\n"
    return out + b"0\r\n" + trailers + b"\r\n"


def _decode(pieces: list[bytes]) -> tuple[bytes, bool]:
    body = ChunkedBody()
    got = b"".join(body.feed(p) for p in pieces)
    return got, body.done


@pytest.mark.parametrize("ext,trailers", [(False, b""), (True, b""), (False, b"X-T: 1\r\n")])
def test_every_cut_of_a_body_gives_its_payload(ext: bool, trailers: bytes) -> None:
    payloads = [b"data: a\n\n", b"data: \r\n\r\n", b"x" * 300, b"\r\n0\r\n"]
    data = _frame(payloads, ext, trailers)
    for cut in range(len(data) + 1):
        got, done = _decode([data[:cut], data[cut:]])
        assert (got, done) == (b"".join(payloads), True), cut
    got, done = _decode([data[i : i + 1] for i in range(len(data))])
    assert (got, done) == (b"".join(payloads), True)


def test_whole_chunks_one_per_read_and_several_per_read() -> None:
    rng = random.Random(4)
    payloads = [b"data: {%d}\n\n" % i * rng.randrange(1, 40) for i in range(200)]
    chunks = [_frame([p])[:-5] for p in payloads]  # each chunk without the body's end
    body, got, k = ChunkedBody(), [], 0
    while k < len(chunks):
        n = rng.choice([1, 1, 1, 2, 3])
        got.append(body.feed(b"".join(chunks[k : k + n])))
        k += n
        assert not body.done
    assert body.feed(b"0\r\n\r\n") == b"" and body.done
    assert b"".join(got) == b"".join(payloads)


def test_the_body_is_not_done_before_its_last_chunk() -> None:
    body = ChunkedBody()
    assert body.feed(b"5\r\nhello\r\n") == b"hello" and not body.done
    assert body.feed(b"0\r\n") == b"" and not body.done  # trailers may follow
    assert body.feed(b"\r\n") == b"" and body.done


@pytest.mark.parametrize(
    "bad", [b"zz\r\nhello\r\n", b"5\r\nhelloXY", b"-5\r\nhello\r\n", b"0x5\r\nhello\r\n", b" \r\n"]
)
def test_bad_framing_is_an_error(bad: bytes) -> None:
    with pytest.raises(ChunkError):
        ChunkedBody().feed(bad)


# -- through the worker, against a server that frames its chunks oddly ---------------------

EVENT = (
    b'data: {"id":"cmpl-%d","object":"text_completion","choices":[{"index":0,"text":" w%d"}]}\n\n'
)
USAGE = (
    b'data: {"id":"cmpl-%d","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":%d}}\n\n'
)


def _writes(rid: int, n: int, mode: str) -> list[bytes]:
    """The body's bytes as the server writes them, each write its own TCP segment."""
    events = [EVENT % (rid, i) for i in range(n)] + [USAGE % (rid, n), b"data: [DONE]\n\n"]
    if mode in ("one-per-write", "head-and-first", "close"):
        return [_frame([e])[:-5] for e in events] + [b"0\r\n\r\n"]
    if mode == "odd":
        # Two events in one chunk, an event over two chunks, chunks split mid-size and
        # mid-data, several chunks in one write, extensions and a trailer.
        body = _frame([events[0] + events[1], events[2][:20], events[2][20:], *events[3:]],
                      ext=True, trailers=b"X-Done: 1\r\n")  # fmt: skip
        cuts = [1, 7, 30, 31, len(body) // 2, len(body) - 3]
        return [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]
    if mode == "bad":
        return [_frame([events[0]])[:-5], b"zz\r\n" + events[1] + b"\r\n", b"0\r\n\r\n"]
    raise ValueError(mode)


class OddServer:
    """HTTP/1.1 keep-alive, a chunked SSE body written in the pieces a mode gives."""

    def __init__(self, mode: str, tokens: int) -> None:
        self.mode, self.tokens, self.accepted = mode, tokens, 0
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buf, rid = b"", 0
        with conn:
            while True:
                while b"\r\n\r\n" not in buf:
                    got = conn.recv(65536)
                    if not got:
                        return
                    buf += got
                head, buf = buf.split(b"\r\n\r\n", 1)
                length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                while len(buf) < length:
                    buf += conn.recv(65536)
                buf = buf[length:]
                rid += 1
                head = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                        b"Transfer-Encoding: chunked\r\n\r\n")  # fmt: skip
                if self.mode == "close":  # this connection answers one request only
                    head = head.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n")
                writes = _writes(rid, self.tokens, self.mode)
                if self.mode == "head-and-first":  # the first token in the headers' segment
                    writes[0] = head + writes[0]
                else:
                    conn.sendall(head)
                for w in writes:
                    time.sleep(0.003)
                    conn.sendall(w)
                if self.mode == "close":
                    return


PROBE = r"""
import json, sys
import loadgen.worker_locust as wl
from locust.env import Environment
from loadgen.schema import WorkerConfig

wl._setup(WorkerConfig(target=sys.argv[1], model="m", input_tokens=4, output_tokens=8))
wl.ClosedLoopUser.host = sys.argv[1]
user = wl.ClosedLoopUser(Environment(user_classes=[wl.ClosedLoopUser], events=wl.events))
for _ in range(3):
    wl.stream_one(user)
print(json.dumps(wl._take_lines()))
"""


@pytest.mark.parametrize("mode", ["one-per-write", "odd", "bad", "head-and-first", "close"])
def test_the_worker_reads_oddly_framed_chunks_and_keeps_the_connection(mode: str) -> None:
    server = OddServer(mode, tokens=8)
    try:
        out = subprocess.run([sys.executable, "-c", PROBE, server.url], capture_output=True,
                             text=True, timeout=120, cwd=ROOT)  # fmt: skip
    finally:
        server.sock.close()
    assert out.returncode == 0, out.stderr[-2000:]
    recs = [json.loads(line) for line in json.loads(out.stdout.strip().splitlines()[-1])]
    assert len(recs) == 3
    if mode == "bad":
        assert all(r["err"] and "chunk" in r["err"] for r in recs), recs
        assert server.accepted == 3  # a broken body's connection is not used again
        return
    for r in recs:
        assert r["err"] is None, r["err"]
        assert r["out"] == 8 and r["in"] == 3 and len(r["itl"]) == 7 and r["ttft"] > 0
    if mode == "close":  # as its head said: a new connection each request
        assert server.accepted == 3
        return
    assert [r["id"] for r in recs] == ["cmpl-1", "cmpl-2", "cmpl-3"]
    if mode == "head-and-first" and sys.platform.startswith("linux"):
        # Read with the headers, the first token is still timed by the kernel's stamp.
        assert all(r["kt"] is True for r in recs), [r["kt"] for r in recs]
    assert server.accepted == 1  # each body read to its end: the connection kept alive
