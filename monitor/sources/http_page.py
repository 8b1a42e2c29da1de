"""GET one plain-http URL's page again and again over one kept-alive connection.

The standard library's http.client spent 2.6 ms of CPU a GET of vLLM's 60 KB
/metrics at one GET a second (cold caches, as the agent runs): it builds the
request each time and reads the headers a line at a time through a buffered
file into email.parser. A request built once, sent whole, and a response
received into one reusable buffer and cut by ``find`` cost 1.0 ms, against
0.75 ms for a bare socket loop with no framing but Content-Length and no
deadline (bench/results/http_get_cost.txt). This client does only that: HTTP/1.1 GET,
no TLS, no proxy, no redirects, no decompression (we ask for identity).

Framing follows RFC 9112 section 6.3: ``Transfer-Encoding: chunked`` (its
extensions and trailers read past), else ``Content-Length``, else the body runs
to the end of the connection. 1xx interim answers are skipped. A response
bigger than ``max_body`` is refused rather than held in memory, and every wait
(connect, send, each recv) gets only what is left of the caller's deadline, so
a server trickling a byte a second cannot hold a tick past it.

Errors: TimeoutError past the deadline; ConnectionError (PeerClosed among them)
when the server closes or resets the connection; BadResponse for an answer that
is not HTTP we can read; any other OSError as the socket raises it. After any of
them the connection is closed, and the next ``connect`` opens a fresh one.
"""

from __future__ import annotations

import socket
import time
from typing import NamedTuple
from urllib.parse import quote

MAX_BODY = 64 << 20  # a metrics page is ~60 KB; a server sending 64 MiB is broken
MAX_HEAD = 64 << 10  # status line and headers (http.client allows 100 lines of 64 KiB)
MAX_LINE = 4096  # a chunk-size line or a trailer line
_INITIAL = 64 << 10  # the receive buffer's size to start with; it grows to the page
_NO_BODY = (204, 304)
# What a request target may hold as is; anything else (space, control, non-ASCII) is
# percent-encoded: http.client raised InvalidURL on those, a ValueError nobody caught.
_TARGET_SAFE = "/?#[]@!$&'()*+,;=:%-._~"


class BadResponse(Exception):
    """The server's answer is not HTTP/1.x we can read, or is too large to take."""


class PeerClosed(ConnectionError):
    """The server closed the connection before its response was complete."""


class Response(NamedTuple):
    status: int
    reason: str
    content_type: str | None
    body: bytes


def build_request(host: str, port: int, target: str, headers: dict[str, str]) -> bytes:
    """The bytes of a GET of ``target`` from ``host:port`` with ``headers``, made once."""
    if not host.isascii():
        try:
            host = host.encode("idna").decode("ascii")  # as http.client writes a Host
        except UnicodeError:
            host = quote(host, safe="")  # no such host; connect says so
    name = f"[{host}]" if ":" in host else host  # an IPv6 literal
    host_header = name if port == 80 else f"{name}:{port}"
    lines = [f"GET {quote(target or '/', safe=_TARGET_SAFE)} HTTP/1.1", f"Host: {host_header}"]
    lines += [f"{key}: {value}" for key, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


class PageClient:
    """One connection to ``host:port`` that sends ``request`` and reads the answer.

    Not thread-safe. ``connect(deadline)`` when ``connected`` is false, then
    ``get(deadline)``; deadlines are ``time.monotonic()`` values.
    """

    __slots__ = ("host", "port", "request", "max_body", "_sock", "_buf", "_view", "_start", "_end")

    def __init__(self, host: str, port: int, request: bytes, max_body: int = MAX_BODY) -> None:
        self.host = host
        self.port = port
        self.request = request
        self.max_body = max_body
        self._sock: socket.socket | None = None
        # One receive buffer for every response: bytes live in [_start, _end).
        self._buf = bytearray(0)
        self._view = memoryview(self._buf)
        self._start = 0
        self._end = 0

    @property
    def connected(self) -> bool:
        return self._sock is not None

    def connect(self, deadline: float) -> None:
        self.close()
        sock = socket.create_connection((self.host, self.port), timeout=_left(deadline))
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:  # pragma: no cover - a socket family without TCP options
            pass
        self._sock = sock
        if not self._buf:
            self._resize(_INITIAL)

    def close(self) -> None:
        sock, self._sock = self._sock, None
        self._start = self._end = 0
        if sock is not None:
            sock.close()

    def get(self, deadline: float) -> Response:
        """Send the request, return the final response; raise as the module says."""
        sock = self._sock
        if sock is None:
            raise PeerClosed("not connected")
        try:
            sock.settimeout(_left(deadline))
            sock.sendall(self.request)
            while True:
                version, status, reason, headers = self._read_head(sock, deadline)
                if status >= 200:
                    break
                # 1xx: an interim answer (100 Continue, 103 Early Hints); the real one follows.
            body, reusable = self._read_body(sock, deadline, version, status, headers)
        except BaseException:
            self.close()
            raise
        if not reusable or self._start != self._end:
            self.close()  # the server said so, or sent more than the response
        self._start = self._end = 0
        if len(self._buf) > 4 * max(_INITIAL, len(body)):
            self._resize(_INITIAL)  # a one-off big answer need not stay in memory
        return Response(status, reason, headers.get("content-type"), body)

    # ---------------------------------------------------------------- reading
    def _recv(self, sock: socket.socket, deadline: float) -> int:
        """Receive what has come into the free end of the buffer; 0 at end of stream."""
        if self._end == len(self._buf):
            self._room(len(self._buf) - self._start + 1)
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("deadline passed")
        sock.settimeout(left)
        n = sock.recv_into(self._view[self._end :])
        self._end += n
        return n

    def _room(self, size: int) -> None:
        """Make the buffer hold ``size`` bytes from ``_start`` on: move them to the front,
        grow it if that is not enough."""
        if self._start + size <= len(self._buf):
            return
        kept = self._end - self._start
        if size > len(self._buf):
            # Doubling, but never far past the most a response may hold.
            cap = max(size, self.max_body + MAX_HEAD + MAX_LINE)
            self._resize(min(max(size, 2 * len(self._buf)), cap), keep=True)
        elif self._start:
            self._buf[:kept] = self._buf[self._start : self._end]
            self._start, self._end = 0, kept

    def _resize(self, size: int, keep: bool = False) -> None:
        new = bytearray(size)
        kept = self._end - self._start if keep else 0
        if kept:
            new[:kept] = self._view[self._start : self._end]
        self._view.release()
        self._buf, self._view = new, memoryview(new)
        self._start, self._end = 0, kept

    def _read_head(
        self, sock: socket.socket, deadline: float
    ) -> tuple[str, int, str, dict[str, str]]:
        scanned = 0  # how far past _start the search has looked (_recv may move _start)
        while True:
            buf = self._buf
            scan = self._start + scanned
            # The head ends at an empty line: CRLF CRLF, or bare LFs from a lax server.
            end = buf.find(b"\n\r\n", scan, self._end)
            if end >= 0:
                bare = buf.find(b"\n\n", scan, end)
                stop, skip = (bare, 2) if bare >= 0 else (end, 3)
                break
            stop = buf.find(b"\n\n", scan, self._end)
            if stop >= 0:
                skip = 2
                break
            if self._end - self._start > MAX_HEAD:
                raise BadResponse(f"response headers over {MAX_HEAD >> 10} KiB")
            scanned = max(0, self._end - self._start - 2)
            if not self._recv(sock, deadline):
                got = self._end - self._start
                raise PeerClosed(f"after {got} bytes of headers" if got else "no response")
        head = buf[self._start : stop].decode("latin-1")
        self._start = stop + skip
        lines = head.split("\n")
        status_line = lines[0].rstrip("\r")
        version, _, rest = status_line.partition(" ")
        code, _, reason = rest.partition(" ")
        if (
            not version.startswith("HTTP/1.")
            or len(code) != 3
            or not code.isascii()
            or not code.isdigit()
        ):
            raise BadResponse(f"not an HTTP/1.x status line: {status_line[:60]!r}")
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep or name[:1] in (" ", "\t"):
                continue  # not a header (or an obsolete folded line): nothing we read
            key = name.strip().lower()
            value = value.strip()
            # Repeats join as one list, the way RFC 9110 section 5.3 combines them.
            headers[key] = f"{headers[key]}, {value}" if key in headers else value
        return version, int(code), reason.strip(), headers

    def _read_body(
        self,
        sock: socket.socket,
        deadline: float,
        version: str,
        status: int,
        headers: dict[str, str],
    ) -> tuple[bytes, bool]:
        """The body, and whether the connection may carry the next request."""
        tokens = {t.strip().lower() for t in headers.get("connection", "").split(",")}
        if version == "HTTP/1.0":
            reusable = "keep-alive" in tokens
        else:
            reusable = "close" not in tokens
        if status in _NO_BODY:
            return b"", reusable
        coding = headers.get("transfer-encoding")
        if coding is not None:
            if coding.rpartition(",")[2].strip().lower() == "chunked":
                # With a Content-Length beside it the message is suspect: do not reuse.
                body = self._read_chunked(sock, deadline)
                return body, reusable and "content-length" not in headers
            return self._read_to_end(sock, deadline), False
        length = headers.get("content-length")
        if length is None:
            return self._read_to_end(sock, deadline), False
        values = {v.strip() for v in length.split(",")}
        size_text = values.pop() if len(values) == 1 else ""
        if not size_text.isascii() or not size_text.isdigit():
            raise BadResponse(f"malformed Content-Length {length[:40]!r}")
        size = int(size_text)
        if size > self.max_body:
            raise BadResponse(f"response of {size} bytes, over the {_size(self.max_body)} limit")
        return self._take(sock, deadline, size), reusable

    def _take(self, sock: socket.socket, deadline: float, size: int) -> bytes:
        self._room(size)
        while self._end - self._start < size:
            if not self._recv(sock, deadline):
                raise PeerClosed(f"after {self._end - self._start} of {size} bytes")
        start = self._start
        self._start = start + size
        return bytes(self._view[start : start + size])

    def _read_line(self, sock: socket.socket, deadline: float) -> str:
        scanned = 0
        while True:
            end = self._buf.find(b"\n", self._start + scanned, self._end)
            if end >= 0:
                break
            if self._end - self._start > MAX_LINE:
                raise BadResponse(f"a chunk line over {MAX_LINE} bytes")
            scanned = self._end - self._start
            if not self._recv(sock, deadline):
                raise PeerClosed("in the middle of a chunked body")
        line = self._buf[self._start : end].decode("latin-1")
        self._start = end + 1
        return line.rstrip("\r")

    def _read_chunked(self, sock: socket.socket, deadline: float) -> bytes:
        body = bytearray()
        while True:
            line = self._read_line(sock, deadline)
            size_text = line.partition(";")[0].strip()  # past any chunk extension
            if not size_text or len(size_text) > 16 or not _is_hex(size_text):
                raise BadResponse(f"malformed chunk size {line[:40]!r}")
            size = int(size_text, 16)
            if size == 0:
                break
            if len(body) + size > self.max_body:
                raise BadResponse(f"chunked response over the {_size(self.max_body)} limit")
            body += self._take(sock, deadline, size)
            if self._read_line(sock, deadline):
                raise BadResponse("chunk data longer than its size")
        for _ in range(100):  # the trailer fields, read past, up to the empty line
            if not self._read_line(sock, deadline):
                return bytes(body)
        raise BadResponse("over 100 trailer lines")

    def _read_to_end(self, sock: socket.socket, deadline: float) -> bytes:
        while True:
            if self._end - self._start > self.max_body:
                raise BadResponse(f"response over the {_size(self.max_body)} limit")
            if not self._recv(sock, deadline):
                break
        body = bytes(self._view[self._start : self._end])
        self._start = self._end
        return body


_HEX = frozenset("0123456789abcdefABCDEF")


def _is_hex(text: str) -> bool:
    return all(c in _HEX for c in text)


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("deadline passed")
    return left


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n} bytes"
