"""Per-request trace spans sent as OTLP/HTTP protobuf, as vLLM's ``--otlp-traces-endpoint`` does.

vLLM ends each finished request with one ``llm_request`` span (kind SERVER) that starts at
the request's arrival, continues the client's W3C ``traceparent`` when one came, and carries
the request's queue, prefill, first-token, decode and end-to-end times as attributes. The
simulator sends the same, so a collector that splits time to first token can be tested
without vLLM.

The protobuf is written by hand (a few message types of opentelemetry-proto's
``ExportTraceServiceRequest``): the simulator takes on no dependency for it.
"""

from __future__ import annotations

import os
import re
import struct
import sys
import threading
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TextIO
from urllib.parse import urlsplit

from simulator.errors import SimConfigError

SPAN_NAME = "llm_request"
SPAN_KIND_SERVER = 2
SCOPE_NAME = "simulator.otlp"
SERVICE_NAME = "headroom-sim"

AttrValue = str | bool | int | float

# version-traceid-parentid-flags; a later version may append fields, version 00 may not.
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")


@dataclass(frozen=True, slots=True)
class TraceParent:
    trace_id: bytes  # 16 bytes
    span_id: bytes  # 8 bytes: the client's span, the parent of ours


def parse_traceparent(header: str | None) -> TraceParent | None:
    """The W3C trace context a client sent, or None for none or a malformed one (a new trace)."""
    if not header:
        return None
    m = _TRACEPARENT.fullmatch(header.strip())
    if m is None:
        return None
    version, trace_hex, span_hex, _flags, rest = m.groups()
    if version == "ff" or (version == "00" and rest):
        return None
    if trace_hex == "0" * 32 or span_hex == "0" * 16:
        return None
    return TraceParent(bytes.fromhex(trace_hex), bytes.fromhex(span_hex))


@dataclass(frozen=True, slots=True)
class SpanRecord:
    trace_id: bytes
    span_id: bytes
    parent_span_id: bytes  # empty for a root span
    start_ns: int
    end_ns: int
    attributes: tuple[tuple[str, AttrValue], ...]


def new_span(
    parent: TraceParent | None,
    start_ns: int,
    end_ns: int,
    attributes: tuple[tuple[str, AttrValue], ...],
) -> SpanRecord:
    trace_id = parent.trace_id if parent is not None else os.urandom(16)
    parent_id = parent.span_id if parent is not None else b""
    return SpanRecord(trace_id, os.urandom(8), parent_id, start_ns, end_ns, attributes)


# -- protobuf wire format ------------------------------------------------------------

_VARINT, _I64, _LEN = 0, 1, 2


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1  # a negative int64 is its two's complement, ten bytes
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _tag(field: int, wire: int) -> bytes:
    return _varint(field << 3 | wire)


def _len_field(field: int, data: bytes) -> bytes:
    return _tag(field, _LEN) + _varint(len(data)) + data


def _str_field(field: int, text: str) -> bytes:
    return _len_field(field, text.encode())


def _any_value(value: AttrValue) -> bytes:
    # AnyValue: string_value=1, bool_value=2, int_value=3, double_value=4.
    if isinstance(value, str):
        return _str_field(1, value)
    if isinstance(value, bool):  # before int: a bool is an int to Python
        return _tag(2, _VARINT) + _varint(int(value))
    if isinstance(value, int):
        return _tag(3, _VARINT) + _varint(value)
    return _tag(4, _I64) + struct.pack("<d", value)


def _key_value(key: str, value: AttrValue) -> bytes:
    return _str_field(1, key) + _len_field(2, _any_value(value))


def encode_span(span: SpanRecord) -> bytes:
    out = [
        _len_field(1, span.trace_id),
        _len_field(2, span.span_id),
    ]
    if span.parent_span_id:
        out.append(_len_field(4, span.parent_span_id))
    out += [
        _str_field(5, SPAN_NAME),
        _tag(6, _VARINT) + _varint(SPAN_KIND_SERVER),
        _tag(7, _I64) + struct.pack("<Q", span.start_ns),
        _tag(8, _I64) + struct.pack("<Q", span.end_ns),
    ]
    out += [_len_field(9, _key_value(k, v)) for k, v in span.attributes]
    return b"".join(out)


def encode_request(spans: Sequence[SpanRecord], service_name: str = SERVICE_NAME) -> bytes:
    """An ExportTraceServiceRequest holding ``spans`` under one resource and one scope."""
    resource = _len_field(1, _key_value("service.name", service_name))
    scope = _len_field(1, _str_field(1, SCOPE_NAME))
    scope_spans = scope + b"".join(_len_field(2, encode_span(s)) for s in spans)
    resource_spans = _len_field(1, resource) + _len_field(2, scope_spans)
    return _len_field(1, resource_spans)


# -- the exporter ---------------------------------------------------------------------


def check_endpoint(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise SimConfigError(f"--otlp-traces-endpoint wants an http(s) URL, got {url!r}")
    return url


class SpanExporter:
    """Queues finished requests' spans and POSTs them in batches from its own thread.

    ``add`` is all the serving side pays (an append to a bounded deque); encoding and
    sending happen on the exporter thread, so a slow or dead collector never holds a
    request up. Past ``max_queued`` unsent spans the oldest are dropped.
    """

    def __init__(
        self,
        url: str,
        interval_s: float = 0.2,
        max_queued: int = 4096,
        batch: int = 512,
        timeout_s: float = 2.0,
        err: TextIO | None = None,
    ) -> None:
        self.url = check_endpoint(url)
        self.interval_s = interval_s
        self.batch = batch
        self.timeout_s = timeout_s
        self.err = err if err is not None else sys.stderr
        self._queue: deque[SpanRecord] = deque(maxlen=max_queued)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="otlp-export", daemon=True)
        self._complained = False
        self.sent = 0
        self.failed_batches = 0

    def start(self) -> None:
        self._thread.start()

    def add(self, span: SpanRecord) -> None:
        self._queue.append(span)

    def close(self, timeout: float = 5.0) -> None:
        """Stop the thread after it sends what is queued (one try each batch)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.flush()
        self.flush()

    def flush(self) -> None:
        while self._queue:
            spans: list[SpanRecord] = []
            try:
                while len(spans) < self.batch:
                    spans.append(self._queue.popleft())
            except IndexError:
                pass
            if not self._post(encode_request(spans)):
                return  # this batch is dropped; the rest wait for the next tick
            self.sent += len(spans)

    def _post(self, body: bytes) -> bool:
        req = urllib.request.Request(
            self.url,
            data=body,
            method="POST",
            headers={"Content-Type": "application/x-protobuf"},
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                resp.read()
            return True
        except (urllib.error.URLError, OSError, ValueError) as exc:
            self.failed_batches += 1
            if not self._complained:
                self._complained = True
                http = isinstance(exc, urllib.error.HTTPError)
                reason = exc if http else getattr(exc, "reason", None) or exc
                print(
                    f"simulator: cannot send trace spans to {self.url} ({reason}); "
                    "dropping them while it fails",
                    file=self.err,
                    flush=True,
                )
            return False
