"""A raw-socket HTTP server on 127.0.0.1 that answers each request with scripted bytes.

http.server frames every answer itself; the client's tests need the framings,
splits and misbehaviour real servers produce, byte for byte.
"""

from __future__ import annotations

import socket
import threading
import time
from collections import deque
from dataclasses import dataclass


@dataclass
class Answer:
    """What the server sends for one request: ``pieces`` one by one, ``gap`` seconds apart."""

    pieces: list[bytes]
    gap: float = 0.0
    close: bool = False  # close the connection after sending (whatever the headers said)


def ok(body: bytes, *headers: str) -> Answer:
    """A 200 with a Content-Length, in one piece."""
    head = "".join(f"{h}\r\n" for h in headers)
    return Answer([b"HTTP/1.1 200 OK\r\n" + head.encode() +
                   f"Content-Length: {len(body)}\r\n\r\n".encode() + body])  # fmt: skip


class RawServer:
    """Accepts on 127.0.0.1:0; each request read (up to its empty line) takes the next Answer.

    With no answer left, the connection is closed unanswered. ``accepts`` counts the
    connections, ``requests`` holds each request's bytes.
    """

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/metrics"
        self.answers: deque[Answer] = deque()
        self.accepts = 0
        self.requests: list[bytes] = []
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self._stopped = False
        threading.Thread(target=self._accept, daemon=True).start()

    def answer(self, *answers: Answer) -> None:
        with self._lock:
            self.answers.extend(answers)

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return  # closed by stop()
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # pieces go apart
            with self._lock:
                self.accepts += 1
                self._conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            pending = b""
            while True:
                try:
                    while b"\r\n\r\n" not in pending:
                        data = conn.recv(65536)
                        if not data:
                            return
                        pending += data
                except OSError:
                    return
                request, _, pending = pending.partition(b"\r\n\r\n")
                with self._lock:
                    self.requests.append(request + b"\r\n\r\n")
                    answer = self.answers.popleft() if self.answers else None
                if answer is None:
                    return
                try:
                    for i, piece in enumerate(answer.pieces):
                        if i and answer.gap:
                            time.sleep(answer.gap)
                        conn.sendall(piece)
                except OSError:
                    return  # the client gave up (the deadline tests)
                if answer.close:
                    return

    def __enter__(self) -> RawServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._listener.close()
        with self._lock:
            for conn in self._conns:
                try:
                    conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
