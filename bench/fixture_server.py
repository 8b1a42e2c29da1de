"""A /metrics page served from a fixture on 127.0.0.1, the way vLLM serves its own.

Keep-alive (HTTP/1.1) and TCP_NODELAY, as vLLM's uvicorn does: a server that closed
after each response would bill a TCP connect to every scrape, and without NODELAY
Nagle holds the body (a second write) for the client's delayed ACK, 40 ms a read.
DownableServer is the page for fault tests and soaks: it goes down and comes back.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def send_page(
    handler: BaseHTTPRequestHandler,
    body: bytes,
    content_type: str = "text/plain; version=0.0.4; charset=utf-8",
) -> None:
    """A 200 answer of body with its length, so that the connection is kept alive."""
    handler.send_response(200)
    handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def start(body: bytes, port: int = 0) -> ThreadingHTTPServer:
    """Serve `body` at every GET from a daemon thread; the caller shuts it down."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            super().setup()
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            send_page(self, body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


@contextmanager
def serving(body: bytes) -> Iterator[str]:
    """The page's base URL while the block runs."""
    httpd = start(body)
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a client that gave up on a slow answer is part of the fault


class DownableServer:
    """A page on 127.0.0.1 (HTTP/1.1) that goes down as a dying process does and comes back.

    ``answer`` writes each GET's response. ``stop`` cuts the kept-alive connections too: a
    server that is down answers none, not even on a connection opened before; ``start``
    serves again on the same port.
    """

    def __init__(self, answer: Callable[[BaseHTTPRequestHandler], None]) -> None:
        self.port = 0
        self._httpd: ThreadingHTTPServer | None = None
        conns: set[socket.socket] = set()
        self._conns = conns

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                conns.add(self.connection)

            def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
                answer(self)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                pass

        self._handler = Handler
        self.start()

    def start(self) -> None:
        self._httpd = _QuietServer(("127.0.0.1", self.port), self._handler)
        self.port = self._httpd.server_address[1]
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        for conn in list(self._conns):
            try:
                conn.shutdown(socket.SHUT_RDWR)
                conn.close()
            except OSError:
                pass
        self._conns.clear()
