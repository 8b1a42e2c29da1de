"""Reads one scripted SSE response through the worker's StreamReader; prints what it found.

Run as a child process (gevent's hub lives there, not in pytest's process):

    python reader_run.py SCENARIO PATH  (PATH: "c" the C reader, "python" Python alone,
                                         "collect" the C reader under a 2 ms collect interval)

A server thread in this process writes the scenario's pieces to a loopback connection, each
after the client counted what the previous one carried, so each piece is one read whatever
the machine's stalls (the pieces meant to share a read are written as one). The client side
is what the worker builds after a response's headers: a Stream with its chunked framing and
SSE parser, read by the hub.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import gevent  # noqa: E402

from loadgen import rxstamp, worker_reader  # noqa: E402
from loadgen.chunked import ChunkedBody  # noqa: E402
from loadgen.sse import SseParser  # noqa: E402

PLAIN = 40


def chunk(payload: bytes) -> bytes:
    return b"%x\r\n" % len(payload) + payload + b"\r\n"


def event(text: str | None, usage: int | None = None, rid: str = "cmpl-7") -> bytes:
    obj: dict = {"id": rid, "object": "text_completion", "created": 1, "model": "m"}
    obj["choices"] = [] if text is None else [
        {"index": 0, "text": text, "logprobs": None, "finish_reason": None}]  # fmt: skip
    if usage is not None:
        obj["usage"] = {"prompt_tokens": 5, "completion_tokens": usage, "total_tokens": 5 + usage}
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def scenario(name: str) -> tuple[list[bytes], int]:
    """(pieces written one at a time, the tokens they carry)."""
    pieces = [chunk(event(" first"))]
    pieces += [chunk(event(f" t{i}")) for i in range(PLAIN)]
    if name == "closed":
        return pieces, 1 + PLAIN  # then the server closes mid-stream
    whole = chunk(event(' say "hi"'))  # an escaped quote: not the learnt shape
    pieces += [
        whole,
        chunk(event("")),  # an empty text: an event, no token
        chunk(event(" a")) + chunk(event(" b")),  # two chunks in one read
    ]
    split = chunk(event(" split"))
    pieces += [split[:9], split[9:]]  # one chunk across two reads
    pieces += [chunk(event(" after")) for _ in range(5)]
    tokens = 1 + PLAIN + 1 + 2 + 1 + 5
    pieces += [chunk(event(None, usage=tokens)), chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"]
    return pieces, tokens


class Raw:
    """What the reader needs of geventhttpclient's response once its headers are read."""

    def __init__(self) -> None:
        self.message_complete = False
        self.released = False

    def release(self) -> None:
        self.released = True


def main() -> None:
    name, path = sys.argv[1], sys.argv[2]
    rxstamp.keep_on(timeout_s=30)  # as the worker does: stamps from the first read on
    pieces, tokens = scenario(name)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    client = socket.create_connection(listener.getsockname())
    server, _ = listener.accept()
    server.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    client.setblocking(False)
    stamped = rxstamp.enable(client)
    parser = SseParser()
    stream = worker_reader.Stream(Raw(), client, stamped, parser, time.perf_counter(),
                                  ChunkedBody())  # fmt: skip

    sent: list[tuple[float, float]] = []  # each piece's send call: (before, after)
    taken: list[float] = []  # how long after its send each piece was seen read

    def taken_off() -> int:
        # The payload counted (the C reader holds its count until Python reads) or buffered.
        hot = stream.hot
        return stream.nbytes + (hot.held if hot is not None else 0) + len(parser._buf)

    def serve() -> None:
        for piece in pieces:
            seen = taken_off()
            before = time.perf_counter()
            server.sendall(piece)  # loopback delivers inside the call
            sent.append((before, time.perf_counter()))
            deadline = time.monotonic() + 10
            # The next piece once this one is taken off the socket (the counted payload or
            # the parser's buffer moved), so each is a read of its own.
            while taken_off() == seen and stream.watcher is not None:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.0001)
            taken.append(time.perf_counter() - sent[-1][1])
            time.sleep(0.001)
        if name == "closed":
            server.close()

    reader = worker_reader.StreamReader(native=path != "python", collect=False)
    slow = 0
    plain_slow = reader._slow

    def counting(*args):  # type: ignore[no-untyped-def]
        nonlocal slow
        slow += 1
        return plain_slow(*args)

    reader._slow = counting  # type: ignore[method-assign]
    # libev's interval set for every poll (the C reader's own rounds aside): gathering at its
    # most must still move no token's time.
    found = worker_reader._collect_function(gevent.get_hub().loop)
    collect = None if found is None else worker_reader._setter(*found)
    if path == "collect":
        assert collect is not None
        collect(0.002)
    threading.Thread(target=serve, daemon=True).start()
    with gevent.Timeout(60):
        reader.read(stream)
    st = parser.state
    times = [st.first_token_at or 0.0]
    for gap in st.gaps:
        times.append(times[-1] + gap)
    print(json.dumps({
        # The first token and the plain ones after it: when each was timed, when it was sent.
        "token_times": times[: 1 + PLAIN], "sent": sent[: 1 + PLAIN], "taken": taken[: 1 + PLAIN],
        "native": reader.native, "stamped": stamped, "expected_tokens": tokens,
        "token_events": st.token_events, "gaps": len(st.gaps),
        "gaps_sum": sum(st.gaps), "span": (st.last_token_at or 0) - (st.first_token_at or 0),
        "min_gap": min(st.gaps, default=None), "completion_tokens": st.completion_tokens,
        "prompt_tokens": st.prompt_tokens, "done": st.done, "error": stream.error,
        "parser_error": st.error, "nbytes": stream.nbytes, "first_kernel": stream.first_kernel,
        "released": stream.raw.released, "slow_calls": slow, "hot_left": stream.hot is not None,
        "collect_setter": collect is not None,
    }))  # fmt: skip


if __name__ == "__main__":
    main()
