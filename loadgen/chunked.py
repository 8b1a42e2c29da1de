"""HTTP/1.1 chunked transfer coding taken off a response body as its bytes arrive.

Pure and gevent-free. The worker read every token's bytes through llhttp, whose
callback into Python for each piece of body (and the bytearray it fills) cost more
than the rest of the token's handling; an engine writes each SSE event as one chunk
and nearly every read is exactly one chunk, which two compares and a slice take apart
here. Anything else (a chunk split across reads, several in one, extensions,
trailers) goes through a small state machine.
"""

from __future__ import annotations

_SIZE, _DATA, _CRLF, _TRAILER, _DONE = range(5)
_HEX = frozenset(b"0123456789abcdefABCDEF")
# A size line longer than this is not a size line (llhttp's limit is smaller still).
_MAX_LINE = 4096


class ChunkError(ValueError):
    """The body is not valid chunked coding."""


class ChunkedBody:
    """Feed the raw body bytes; get back the payload they carry."""

    __slots__ = ("_state", "_left", "_buf", "done")

    def __init__(self) -> None:
        self._state = _SIZE
        self._left = 0  # bytes of the current chunk's data still to come
        self._buf = b""  # a size or trailer line, or a chunk's CRLF, still arriving
        # The last (empty) chunk and the trailers have arrived: the body is complete. A
        # plain attribute, not a property: the reader asks after every token.
        self.done = False

    def between_chunks(self) -> bool:
        """No chunk, size line or trailer half-read: the next byte starts a chunk's size."""
        return self._state == _SIZE and not self._buf and not self.done

    def feed(self, data: bytes) -> bytes:
        """The payload in ``data`` (b"" if none completes here); raises ChunkError on bad framing."""
        if self._state == _SIZE and not self._buf:
            # Whole chunks, as engines write an event: "<hex>\r\n<data>\r\n"; one a read,
            # or several when the reader comes late. One first: nearly every read.
            i = data.find(b"\r\n")
            if 0 < i <= 16 and data.endswith(b"\r\n"):
                head = data[:i]
                if _HEX.issuperset(head) and int(head, 16) == len(data) - i - 4 > 0:
                    return data[i + 2 : -2]
            out: list[bytes] | None = None
            pos, n = 0, len(data)
            while True:
                i = data.find(b"\r\n", pos)
                if not 0 < i - pos <= 16:
                    break
                head = data[pos:i]
                if not _HEX.issuperset(head):
                    break
                end = i + int(head, 16) + 4
                if end == i + 4 or end > n or data[end - 2 : end] != b"\r\n":
                    break
                if end == n and not pos:
                    return data[i + 2 : -2]
                if out is None:
                    out = []
                out.append(data[i + 2 : end - 2])
                pos = end
                if pos == n:
                    return b"".join(out)
            if out is not None:
                return b"".join(out) + self._slow(data[pos:])
        return self._slow(data)

    def _slow(self, data: bytes) -> bytes:
        out: list[bytes] = []
        buf = self._buf + data if self._buf else data
        self._buf = b""
        pos, n = 0, len(buf)
        while pos < n:
            state = self._state
            if state == _DATA:
                take = min(self._left, n - pos)
                out.append(buf[pos : pos + take])
                pos += take
                self._left -= take
                if not self._left:
                    self._state = _CRLF
            elif state == _CRLF:
                if n - pos < 2:
                    if buf[pos:] != b"\r":
                        raise ChunkError("chunk data not followed by CRLF")
                    self._buf = buf[pos:]
                    break
                if buf[pos : pos + 2] != b"\r\n":
                    raise ChunkError("chunk data not followed by CRLF")
                pos += 2
                self._state = _SIZE
            elif state in (_SIZE, _TRAILER):
                end = buf.find(b"\r\n", pos)
                if end < 0:
                    if n - pos > _MAX_LINE:
                        raise ChunkError("chunk size line too long")
                    self._buf = buf[pos:]
                    break
                line = buf[pos:end]
                pos = end + 2
                if state == _TRAILER:
                    if not line:
                        self._state = _DONE
                        self.done = True
                    continue
                size_text = line.split(b";", 1)[0].strip(b" \t")
                if not size_text or len(size_text) > 16 or not _HEX.issuperset(size_text):
                    raise ChunkError(f"bad chunk size line {line[:40]!r}")
                size = int(size_text, 16)
                if size:
                    self._state, self._left = _DATA, size
                else:
                    self._state = _TRAILER
            else:  # done: bytes past the body's end are not this response's
                break
        return b"".join(out)
