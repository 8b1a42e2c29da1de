"""The response head nearly every streamed request gets, read without the HTTP parser.

An engine answers a streaming completion with ``200``, a chunked body and a connection kept
alive. geventhttpclient's response object parses that head with llhttp calling back into
Python for each header's name and value, builds its header index and carries a finalizer:
at 64 streams about a twentieth of the worker's CPU, for three facts the worker uses (the
status, that the body is chunked, that the connection may be reused). Here those are read
from the head's bytes directly; any head that says something else (another status, a length,
``Connection: close``, HTTP/1.0, an obsolete folded line, anything malformed) goes to
geventhttpclient's parser as before.

Pure and gevent-free: the worker hands a head in and gets a status back, or None.
"""

from __future__ import annotations

from typing import Any

_CRLF = b"\r\n"


def chunked_keep_alive(head: bytes) -> int | None:
    """The status of ``head`` (up to and with its blank line) when it is HTTP/1.1, a 2xx with
    a body, ``Transfer-Encoding: chunked`` alone, no ``Content-Length`` and no ``Connection:
    close``; else None (the HTTP parser reads it)."""
    if not head.startswith(b"HTTP/1.1 2") or not head.endswith(b"\r\n\r\n"):
        return None
    lines = head[:-4].split(_CRLF)
    status = lines[0]
    code = status[9:12]
    if not code.isdigit() or status[12:13] not in (b"", b" ") or code in (b"204", b"205"):
        return None
    chunked = False
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep or not name or name != name.strip() or line[:1] in (b" ", b"\t"):
            return None  # malformed, or an obsolete folded line
        name = name.lower()
        if name == b"transfer-encoding":
            if chunked or value.strip().lower() != b"chunked":
                return None  # another coding, or the header twice
            chunked = True
        elif name == b"content-length":
            return None
        elif name == b"connection" and b"close" in value.lower():
            return None
    return int(code) if chunked else None


class ChunkedResponse:
    """What the worker needs of a response with such a head: its status, its connection and
    whether its body was read to the end (then the connection goes back to the pool)."""

    __slots__ = ("status_code", "_sock", "_pool", "message_complete")

    def __init__(self, status_code: int, sock: Any, pool: Any) -> None:
        self.status_code = status_code
        self._sock = sock
        self._pool = pool
        self.message_complete = False  # set by the body's reader at the last chunk

    def release(self) -> None:
        """Give the connection back: reused after a whole body, else closed (as
        geventhttpclient's response does)."""
        sock, pool = self._sock, self._pool
        self._sock = self._pool = None
        if sock is not None and pool is not None:
            if self.message_complete:
                pool.return_socket(sock)
            else:
                pool.release_socket(sock)

    def __del__(self) -> None:
        # A response dropped unreleased (an exception between the head and the body's
        # reader) must not leave its connection counted as taken from the pool.
        if self._sock is not None and self._pool is not None:
            self._pool.release_socket(self._sock)
