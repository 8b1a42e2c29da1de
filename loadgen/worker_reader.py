"""The hub reads every open response stream itself: no greenlet switch per token.

Each stream's own greenlet sends its request and reads the headers, then hands the
socket here and sleeps until the body ends. Read by its own greenlet, every token cost
a trip through gevent's hub: an I/O watcher started and stopped, two greenlet switches,
the cooperative socket's wrappers. Here each body has one watcher for its whole life
whose callback reads, stamps and parses in the hub's own loop: an engine emits a token
for every running stream at each step's end, and the one epoll_wait that finds those
sockets readable runs all their callbacks in turn, with no switch and no second epoll
(a reader greenlet of its own, woken through an epoll of its own, cost both per burst).

Each read is stamped with the kernel's receive time (SO_TIMESTAMPNS) where the socket
has it, so the order the sockets are read in changes no token's time.

Imported by the worker process only (gevent); TLS sockets stay with their own greenlet,
as their decrypted bytes are buffered where epoll cannot see them.
"""

from __future__ import annotations

import socket
import time
from typing import Any

import gevent
from gevent.event import AsyncResult

from loadgen import rxstamp
from loadgen.chunked import ChunkedBody
from loadgen.sse import SseParser

RECV_BYTES = 65536
_READ = 1  # libev's EV_READ
_CMSG = rxstamp.cmsg_space()
_unpack = rxstamp.TIMESPEC.unpack_from
_SO_TIMESTAMPNS = rxstamp.SO_TIMESTAMPNS
_SOL_SOCKET = socket.SOL_SOCKET
_MAX_AGE_S = rxstamp.MAX_AGE_S
_INET = (socket.AF_INET, socket.AF_INET6)
_perf = time.perf_counter
_wall = time.time


class Stream:
    """One response body being read: the HTTP parser, the SSE parser and what they found."""

    __slots__ = ("raw", "sock", "fd", "kernel", "parser", "nbytes", "end", "first_kernel",
                 "error", "done", "chunks", "watcher")  # fmt: skip

    def __init__(self, raw: Any, sock: Any, kernel: bool, parser: SseParser, end: float,
                 chunks: ChunkedBody | None = None) -> None:  # fmt: skip
        self.raw = raw  # geventhttpclient's response: its headers, its connection
        # The chunked framing, taken off here; None: the HTTP parser (llhttp) takes it off.
        self.chunks = chunks
        self.sock = sock  # the plain, non-blocking socket under gevent's
        self.fd = sock.fileno()
        self.kernel = kernel
        self.parser = parser
        self.nbytes = 0
        self.end = end
        self.first_kernel: bool | None = None
        self.error: str | None = None
        self.done = AsyncResult()
        self.watcher: Any = None  # the hub's I/O watcher while the body is being read

    def feed(self, data: bytes, stamp: float, kernel: bool) -> None:
        """Body bytes as read off the socket at ``stamp``."""
        chunks = self.chunks
        if chunks is None:
            self.raw.feed(data)
            self.take(stamp, kernel)
            return
        payload = chunks.feed(data)
        if payload:
            self.nbytes += len(payload)
            if self.first_kernel is None:  # no token yet (set with the first)
                parser = self.parser
                parser.feed(payload, stamp)
                if parser.state.first_token_at is not None:
                    self.first_kernel = kernel
            else:
                self.parser.feed(payload, stamp)
            self.end = stamp
        if chunks.done:
            # The body ended where the parser never looked: the connection goes back to the
            # pool as the parser would have sent it (kept alive unless its headers said not).
            raw = self.raw
            raw.message_complete = True
            raw.release()

    def take(self, stamp: float, kernel: bool) -> None:
        """Parse what the HTTP parser has set aside as body, as arrived at ``stamp``."""
        buf = self.raw._body_buffer
        if buf:
            chunk = bytes(buf)
            del buf[:]
            self.nbytes += len(chunk)
            parser = self.parser
            if parser.state.first_token_at is None:
                parser.feed(chunk, stamp)
                if parser.state.first_token_at is not None:
                    self.first_kernel = kernel
            else:
                parser.feed(chunk, stamp)
            self.end = stamp


class StreamReader:
    """Reads the registered streams' sockets as they turn readable; one per process."""

    def __init__(self) -> None:
        self._loop = gevent.get_hub().loop

    def read(self, stream: Stream) -> None:
        """Read ``stream`` to its end (or error); returns when it is done.

        On any exception in the caller's greenlet (its deadline, a kill) the stream is
        let go before the exception goes on.
        """
        watcher = self._loop.io(stream.fd, _READ)
        stream.watcher = watcher
        watcher.start(self._readable, stream)
        try:
            stream.done.get()
        finally:
            self.forget(stream)

    def forget(self, stream: Stream) -> None:
        watcher = stream.watcher
        if watcher is not None:
            stream.watcher = None
            watcher.stop()
            watcher.close()

    def _readable(self, stream: Stream) -> None:
        """The watcher's callback, run by the hub: read, stamp and parse what has arrived.

        Runs for every token of every stream: one function, its names bound locally.
        """
        if stream.watcher is None:
            return
        try:
            sock = stream.sock
            if stream.kernel:
                try:
                    data, anc, _flags, _addr = sock.recvmsg(RECV_BYTES, _CMSG)
                except (BlockingIOError, InterruptedError):
                    return
                stamp, kernel = _perf(), False
                for level, kind, payload in anc:
                    if level == _SOL_SOCKET and kind == _SO_TIMESTAMPNS and len(payload) >= 16:
                        sec, nsec = _unpack(payload)
                        # The kernel's wall-clock stamp as a perf_counter time: less the
                        # offset between the two clocks.
                        at = sec + nsec * 1e-9 - (_wall() - stamp)
                        # As rxstamp.to_perf: a stamp from the future or long ago is not trusted.
                        if stamp - _MAX_AGE_S <= at <= stamp + 1e-3:
                            kernel = True
                            if at < stamp:
                                stamp = at
                        break
            else:
                try:
                    data = sock.recv(RECV_BYTES)
                except (BlockingIOError, InterruptedError):
                    return
                stamp, kernel = _perf(), False
            if not data:
                self._finish(stream, "connection closed mid-stream")
                return
            stream.feed(data, stamp, kernel)
            if stream.raw.message_complete:
                self._finish(stream, None)
        except Exception as exc:  # the hub must not see it: it would fail the stream's reader
            self._finish(stream, f"{type(exc).__name__}: {exc}"[:300])

    def _finish(self, stream: Stream, error: str | None) -> None:
        if error is not None and stream.error is None:
            stream.error = error
        self.forget(stream)
        stream.done.set(None)


_READER: StreamReader | None = None


def reader() -> StreamReader:
    global _READER
    if _READER is None:
        _READER = StreamReader()
    return _READER


def plain_socket(sock: Any) -> Any | None:
    """The plain socket under gevent's, when epoll can see all its bytes (not TLS); else None."""
    if sock is None or hasattr(sock, "cipher"):
        return None
    inner = getattr(sock, "_sock", None)
    if inner is None or not hasattr(inner, "recvmsg") or inner.family not in _INET:
        return None
    return inner
