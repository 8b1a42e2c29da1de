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

Where the package was built with its C part (``loadgen._hotread``), the callback is C's for
the read nearly every token is, one whole chunk of the stream's learnt shape, and this
module's Python for everything else (it arms C again after each read it takes). C keeps its
counts (tokens, bytes, the last stamps) and hands them to the Stream and its parser's state
before Python next reads the stream and when the stream is let go. Without it, Python reads
every token, with the same results.

Imported by the worker process only (gevent); TLS sockets stay with their own greenlet,
as their decrypted bytes are buffered where epoll cannot see them.
"""

from __future__ import annotations

import ctypes
import os
import socket
import time
from typing import Any

import gevent
import gevent.socket
from gevent.event import AsyncResult

from loadgen import rxstamp
from loadgen.chunked import ChunkedBody
from loadgen.read_collect import CollectPolicy
from loadgen.sse import SseParser

try:
    from loadgen import _hotread
except ImportError:  # built without its C part (no compiler): Python reads every token
    _hotread = None  # type: ignore[assignment]

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
                 "error", "done", "chunks", "watcher", "hot")  # fmt: skip

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
        self.hot: Any = None  # the C reader, where it reads this stream

    def armed(self) -> tuple[bytes, bytes, list[float]] | None:
        """What the C reader needs to read the next token itself, or None where it must not.

        It may when the next read starting a new chunk and a new event would be one token
        of the learnt shape: the first token already seen, no chunk or event half-read.
        """
        chunks, parser = self.chunks, self.parser
        if chunks is None or self.first_kernel is None or not chunks.between_chunks():
            return None
        return parser.template()

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

    def __init__(self, native: bool = True, collect: bool = True) -> None:
        self._loop = gevent.get_hub().loop
        # False: Python reads every token (the tests compare the two paths).
        self.native = native and _hotread is not None
        # libev's io collect interval, where the hub is gevent's libev (see read_collect):
        # the C reader sets it only while a round of tokens is incomplete, Python always.
        self._set_collect = None
        found = _collect_function(self._loop) if collect else None
        if found is not None and self.native:
            fn, ptr = found
            _hotread.bind_collect(ctypes.cast(fn, ctypes.c_void_p).value, ptr)
            self._set_collect = _hotread.set_gather
        elif found is not None:
            self._set_collect = _setter(*found)
        self.collect = CollectPolicy()

    def read(self, stream: Stream) -> None:
        """Read ``stream`` to its end (or error); returns when it is done.

        On any exception in the caller's greenlet (its deadline, a kill) the stream is
        let go before the exception goes on.
        """
        watcher = self._loop.io(stream.fd, _READ)
        stream.watcher = watcher
        gathered = stream.kernel and self._set_collect is not None
        if gathered:
            self._collect(self.collect.opened())
        try:
            if self.native and stream.chunks is not None:
                hot = _hotread.Reader(stream.fd, stream.kernel, _MAX_AGE_S, stream,
                                      stream.parser.state, self._slow_for(stream))  # fmt: skip
                stream.hot = hot
                hot.arm(self._slow(stream, None, 0.0, 0, 0))  # the head may have brought a token
                watcher.start(hot)
            else:
                watcher.start(self._readable, stream)
            stream.done.get()
        finally:
            # Whatever ended it, the watcher, the C reader's hold and the count are let go.
            self.forget(stream)
            if gathered:
                self._collect(self.collect.closed(stream.parser.state.gaps))

    def _collect(self, interval_s: float | None) -> None:
        if interval_s is not None:
            self._set_collect(interval_s)  # type: ignore[misc]

    def forget(self, stream: Stream) -> None:
        watcher = stream.watcher
        if watcher is not None:
            stream.watcher = None
            watcher.stop()
            watcher.close()
        hot = stream.hot
        if hot is not None:
            stream.hot = None
            hot.close()  # it holds the stream: let the cycle go now

    def _slow_for(self, stream: Stream) -> Any:
        def slow(data: bytes | None, stamp: float, kernel: int, err: int) -> Any:
            return self._slow(stream, data, stamp, kernel, err)

        return slow

    def _slow(self, stream: Stream, data: bytes | None, stamp: float, kernel: int,
              err: int) -> tuple[bytes, bytes, list[float]] | None:  # fmt: skip
        """A read the C reader left to Python: what ``_readable`` does after its recv.

        ``data`` None: nothing read (an error ``err``, or 0: only the arming asked for).
        Returns how the C reader may read the next token, or None.
        """
        if stream.watcher is None:
            return None
        try:
            if data is None:
                if err:  # as the Python read would have raised it (ConnectionResetError, ...)
                    raise OSError(err, os.strerror(err))
            elif not self._take(stream, data, stamp, bool(kernel)):
                return None
            return stream.armed()
        except Exception as exc:  # as in _readable: the hub must not see it
            self._fail(stream, exc)
            return None

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
            self._take(stream, data, stamp, kernel)
        except Exception as exc:  # the hub must not see it: it would fail the stream's reader
            self._fail(stream, exc)

    def _take(self, stream: Stream, data: bytes, stamp: float, kernel: bool) -> bool:
        """Parse bytes just read off ``stream`` (b"": the peer closed); False once it ended."""
        if not data:
            self._finish(stream, "connection closed mid-stream")
            return False
        stream.feed(data, stamp, kernel)
        if stream.raw.message_complete:
            self._finish(stream, None)
            return False
        return True

    def _fail(self, stream: Stream, exc: Exception) -> None:
        self._finish(stream, f"{type(exc).__name__}: {exc}"[:300])

    def _finish(self, stream: Stream, error: str | None) -> None:
        if error is not None and stream.error is None:
            stream.error = error
        self.forget(stream)
        stream.done.set(None)


def _collect_function(loop: Any) -> tuple[Any, int] | None:
    """libev's ev_set_io_collect_interval and ``loop``'s pointer, or None where the hub is not
    gevent's libev loop (libuv, or a libev without the symbol): reads are then as ever."""
    ptr = getattr(loop, "ptr", None)
    if not ptr or type(loop).__module__ != "gevent.libev.corecext":
        return None
    try:
        import gevent.libev.corecext as corecext

        fn = ctypes.CDLL(corecext.__file__).ev_set_io_collect_interval
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_double]
    fn.restype = None
    return fn, ptr


def _setter(fn: Any, ptr: int) -> Any:
    return lambda seconds: fn(ptr, seconds)


_READER: StreamReader | None = None


def reader() -> StreamReader:
    global _READER
    if _READER is None:
        _READER = StreamReader()

    return _READER


_GEVENT_SOCKET = gevent.socket.socket


def plain_socket(sock: Any) -> Any | None:
    """The plain socket under gevent's, when epoll can see all its bytes (not TLS); else None."""
    if type(sock) is _GEVENT_SOCKET:
        # gevent's own plain TCP socket (TLS is a subclass): no hasattr, which on gevent's
        # socket builds and drops an AttributeError, three times a request.
        inner = sock._sock
        return inner if inner.family in _INET else None
    if sock is None or hasattr(sock, "cipher"):
        return None
    inner = getattr(sock, "_sock", None)
    if inner is None or not hasattr(inner, "recvmsg") or inner.family not in _INET:
        return None
    return inner
