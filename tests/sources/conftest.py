"""A real HTTP server on 127.0.0.1 for the HTTP sources' tests."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


@dataclass
class Route:
    body: bytes
    status: int = 200
    delay: float = 0.0
    content_type: str = "text/plain; version=0.0.4; charset=utf-8"
    # Close the connection without answering the next N requests (a dropped keep-alive).
    drop: int = 0


class FakeServer:
    """Serves the routes set on it; ``url`` is its base URL (http://127.0.0.1:PORT)."""

    def __init__(self) -> None:
        self.routes: dict[str, Route] = {}
        self.hits: list[str] = []
        self.authorizations: list[str | None] = []  # each request's Authorization header
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as vLLM's server does

            def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
                with server._lock:
                    server.hits.append(self.path)
                    server.authorizations.append(self.headers.get("Authorization"))
                    route = server.routes.get(self.path)
                    drop = route is not None and route.drop > 0
                    if drop:
                        route.drop -= 1
                if drop:
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if route is None:
                    route = Route(b"not found\n", status=404)
                if route.delay:
                    time.sleep(route.delay)
                try:
                    self.send_response(route.status)
                    self.send_header("Content-Type", route.content_type)
                    self.send_header("Content-Length", str(len(route.body)))
                    self.end_headers()
                    self.wfile.write(route.body)
                except (BrokenPipeError, ConnectionResetError):
                    # a client that timed out (the point of the slow-server tests) left
                    self.close_connection = True

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    def set(self, path: str, body: bytes | str, **kwargs: object) -> None:
        data = body.encode() if isinstance(body, str) else body
        with self._lock:
            self.routes[path] = Route(data, **kwargs)  # type: ignore[arg-type]

    def __enter__(self) -> FakeServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop listening: connections to ``url`` are refused from now on."""
        if self._thread.is_alive():
            self._httpd.shutdown()
            self._httpd.server_close()
            self._thread.join(timeout=10)


@pytest.fixture
def http_server() -> Iterator[FakeServer]:
    with FakeServer() as server:
        yield server


def fixture_text(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


@pytest.fixture
def read_fixture() -> Callable[[str], str]:
    return fixture_text


@pytest.fixture
def engine_page(http_server: FakeServer) -> Callable[[str], str]:
    """Serves tests/fixtures/engines/<name> as /metrics; gives the server's URL."""

    def serve(name: str) -> str:
        http_server.set("/metrics", fixture_text(f"engines/{name}"))
        return http_server.url

    return serve
