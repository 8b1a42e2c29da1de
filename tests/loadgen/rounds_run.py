"""Reads rounds of tokens on many streams through the worker's StreamReader; prints what the
hub's gathering did after each write.

Run as a child process (gevent's hub lives there, not in pytest's process):

    python rounds_run.py

A server thread writes tokens to STREAMS loopback connections, as an engine's steps do: one
token to each running stream per round. After each write, once the hub has read it, it notes
libev's io collect interval as the C reader left it (``_hotread.gather_state()``).
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
from reader_run import Raw, chunk, event  # noqa: E402  (beside this script)

from loadgen import _hotread, rxstamp, worker_reader  # noqa: E402
from loadgen.chunked import ChunkedBody  # noqa: E402
from loadgen.read_collect import STREAMS_FROM  # noqa: E402
from loadgen.sse import SseParser  # noqa: E402

STREAMS = STREAMS_FROM  # enough for the worker's policy to gather


def main() -> None:
    rxstamp.keep_on(timeout_s=30)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(STREAMS)
    servers, streams = [], []
    for _ in range(STREAMS):
        client = socket.create_connection(listener.getsockname())
        server, _ = listener.accept()
        server.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        client.setblocking(False)
        stamped = rxstamp.enable(client)
        servers.append(server)
        streams.append(worker_reader.Stream(Raw(), client, stamped, SseParser(),
                                            time.perf_counter(), ChunkedBody()))  # fmt: skip
    reader = worker_reader.StreamReader()
    notes: list[dict] = []

    def taken(i: int) -> int:
        s = streams[i]
        hot = s.hot
        return s.nbytes + (hot.held if hot is not None else 0) + len(s.parser._buf)

    def write(indices: list[int], text: str, note: str) -> None:
        before = [taken(i) for i in indices]
        for i in indices:
            servers[i].sendall(chunk(event(text, rid=f"cmpl-{i}")))
        deadline = time.monotonic() + 10
        while any(taken(i) == b for i, b in zip(indices, before)) and time.monotonic() < deadline:
            time.sleep(0.0005)
        notes.append({"note": note, **_hotread.gather_state()})

    def serve() -> None:
        every = list(range(STREAMS))
        while any(s.hot is None for s in streams):  # each stream handed to the hub
            time.sleep(0.001)
        write(every, " first", "first tokens, every stream")
        for r in range(3):
            half = STREAMS // 2
            write(every[:half], f" a{r}", "half the streams")
            write(every[half:], f" b{r}", "the other half")
        write([0], " c", "one stream")
        write([0], " d", "the same stream again")
        for s in servers:
            s.close()

    threading.Thread(target=serve, daemon=True).start()
    with gevent.Timeout(60):
        gevent.joinall([gevent.spawn(reader.read, s) for s in streams])
    print(json.dumps({"notes": notes, "tokens": [s.parser.state.token_events for s in streams],
                      "after": _hotread.gather_state()}))  # fmt: skip


if __name__ == "__main__":
    main()
