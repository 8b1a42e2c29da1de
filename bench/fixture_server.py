"""A /metrics page served from a fixture on 127.0.0.1, the way vLLM serves its own.

Keep-alive (HTTP/1.1) and TCP_NODELAY, as vLLM's uvicorn does: a server that closed
after each response would bill a TCP connect to every scrape, and without NODELAY
Nagle holds the body (a second write) for the client's delayed ACK, 40 ms a read.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
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
