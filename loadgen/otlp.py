"""Each request's own queue, prefill and TTFT, from the engine's trace spans.

An engine's histograms give a window's distribution of queue and prefill times, not
which request had which: at and past a knee, time to first token is bimodal (a few
requests queue long, most not at all) and a split of means cannot say what the median
request's TTFT is made of. vLLM started with ``--otlp-traces-endpoint`` ends each request
with a span (``llm_request``) carrying that request's times, in the trace the request's
``traceparent`` header named. The sweep sends a fresh trace id with each request,
receives the spans here (OTLP over HTTP, protobuf), and joins the two by trace id.

The decoder reads only what it needs of ``ExportTraceServiceRequest``
(opentelemetry-proto's trace_service.proto and trace.proto): no protobuf dependency.
"""

from __future__ import annotations

import gzip
import struct
import threading
import zlib
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from monitor.core.errors import HeadroomError

# The span attributes vLLM sets (vllm/tracing/utils.py SpanAttributes), seconds.
QUEUE = "gen_ai.latency.time_in_queue"
PREFILL = "gen_ai.latency.time_in_model_prefill"
TTFT = "gen_ai.latency.time_to_first_token"
REQUEST_ID = "gen_ai.request.id"

MAX_BODY = 64 << 20
# Spans kept for joining: a sweep's requests of the last several steps.
MAX_KEPT = 200_000

PROTOCOL_HINT = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf"


class DecodeError(ValueError):
    pass


# -- protobuf wire format ---------------------------------------------------------------


def _varint(buf: memoryview, i: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        if i >= len(buf):
            raise DecodeError("truncated varint")
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, i
        shift += 7
        if shift > 63:
            raise DecodeError("varint too long")


def _fields(buf: memoryview) -> Iterator[tuple[int, int, Any]]:
    """(field number, wire type, value): an int for varints and fixed-width fields, a
    memoryview for length-delimited ones."""
    i, n = 0, len(buf)
    while i < n:
        key, i = _varint(buf, i)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(buf, i)
        elif wire == 1:
            if i + 8 > n:
                raise DecodeError("truncated fixed64")
            value, i = int.from_bytes(buf[i : i + 8], "little"), i + 8
        elif wire == 2:
            size, i = _varint(buf, i)
            if i + size > n:
                raise DecodeError("truncated field")
            value, i = buf[i : i + size], i + size
        elif wire == 5:
            if i + 4 > n:
                raise DecodeError("truncated fixed32")
            value, i = int.from_bytes(buf[i : i + 4], "little"), i + 4
        else:
            raise DecodeError(f"wire type {wire} is not used by OTLP")
        yield field, wire, value


def _sub(buf: memoryview, want: int) -> Iterator[memoryview]:
    for field, wire, value in _fields(buf):
        if field == want and wire == 2:
            yield value


def _any_value(buf: memoryview) -> Any:
    for field, wire, value in _fields(buf):
        if field == 1 and wire == 2:
            return bytes(value).decode("utf-8", "replace")
        if field == 2 and wire == 0:
            return bool(value)
        if field == 3 and wire == 0:
            return value - (1 << 64) if value >= 1 << 63 else value
        if field == 4 and wire == 1:
            return struct.unpack("<d", value.to_bytes(8, "little"))[0]
    return None  # arrays, key-value lists, bytes: nothing the join reads


@dataclass(frozen=True, slots=True)
class Span:
    trace_id: str  # 32 hex digits
    span_id: str
    parent_span_id: str
    name: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]


def decode_spans(body: bytes) -> list[Span]:
    """The spans of one ``ExportTraceServiceRequest``."""
    out = []
    for rs in _sub(memoryview(body), 1):  # resource_spans
        for ss in _sub(rs, 2):  # scope_spans
            for sp in _sub(ss, 2):  # spans
                out.append(_span(sp))
    return out


def _span(buf: memoryview) -> Span:
    trace = span = parent = b""
    name = ""
    start = end = 0
    attrs: dict[str, Any] = {}
    for field, wire, value in _fields(buf):
        if wire == 2 and field in (1, 2, 4, 5, 9):
            if field == 1:
                trace = bytes(value)
            elif field == 2:
                span = bytes(value)
            elif field == 4:
                parent = bytes(value)
            elif field == 5:
                name = bytes(value).decode("utf-8", "replace")
            else:
                key, val = "", None
                for f, w, v in _fields(value):
                    if f == 1 and w == 2:
                        key = bytes(v).decode("utf-8", "replace")
                    elif f == 2 and w == 2:
                        val = _any_value(v)
                attrs[key] = val
        elif wire == 1 and field == 7:
            start = value
        elif wire == 1 and field == 8:
            end = value
    return Span(trace.hex(), span.hex(), parent.hex(), name, start, end, attrs)


# -- the engine's view of one request -------------------------------------------------


@dataclass(frozen=True, slots=True)
class EngineRequest:
    """One request as the engine timed it, seconds."""

    trace_id: str
    request_id: str | None
    queue_s: float | None
    prefill_s: float | None
    ttft_s: float


def _seconds(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or v < 0:
        return None
    return float(v)


def engine_request(span: Span) -> EngineRequest | None:
    """The request's times, where the span is an engine's request span (it has a TTFT)."""
    ttft = _seconds(span.attributes.get(TTFT))
    if ttft is None or not span.trace_id.strip("0"):
        return None
    rid = span.attributes.get(REQUEST_ID)
    return EngineRequest(
        trace_id=span.trace_id,
        request_id=rid if isinstance(rid, str) else None,
        queue_s=_seconds(span.attributes.get(QUEUE)),
        prefill_s=_seconds(span.attributes.get(PREFILL)),
        ttft_s=ttft,
    )


# -- the receiver ----------------------------------------------------------------------


class TraceReceiver:
    """An OTLP/HTTP trace endpoint on ``host:port`` keeping each request span's times."""

    def __init__(self, host: str = "127.0.0.1", port: int = 4318) -> None:
        self._kept: OrderedDict[str, EngineRequest] = OrderedDict()
        self._cond = threading.Condition()
        self.spans_received = 0
        self.bodies_refused = 0
        self.last_refusal: str | None = None
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                status, text = receiver._receive(self)
                body = text.encode()
                self.send_response(status)
                self.send_header(
                    "Content-Type", "application/x-protobuf" if status == 200 else "text/plain"
                )
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        try:
            self._server = ThreadingHTTPServer((host, port), Handler)
        except OSError as exc:
            raise HeadroomError(
                f"cannot listen for the engine's trace spans on {host}:{port}: {exc.strerror}"
            ) from None
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="otlp-receiver", daemon=True
        )
        self._thread.start()

    @property
    def endpoint(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1/traces"

    def _receive(self, req: BaseHTTPRequestHandler) -> tuple[int, str]:
        ctype = (req.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        try:
            size = int(req.headers.get("Content-Length") or 0)
        except ValueError:
            size = -1
        if size < 0 or size > MAX_BODY:
            return self._refuse(413, "a body of unreadable or too large a size")
        body = req.rfile.read(size)
        if ctype != "application/x-protobuf":
            return self._refuse(415, f"OTLP over HTTP in protobuf only (set {PROTOCOL_HINT})")
        try:
            encoding = (req.headers.get("Content-Encoding") or "").lower()
            if encoding == "gzip":
                body = gzip.decompress(body)
            elif encoding == "deflate":
                body = zlib.decompress(body)
            spans = decode_spans(body)
        except (DecodeError, OSError, zlib.error, EOFError) as exc:
            return self._refuse(400, f"not an OTLP trace export: {exc}")
        self._keep(spans)
        return 200, ""

    def _refuse(self, status: int, why: str) -> tuple[int, str]:
        with self._cond:
            self.bodies_refused += 1
            self.last_refusal = why
        return status, why

    def _keep(self, spans: Sequence[Span]) -> None:
        with self._cond:
            self.spans_received += len(spans)
            for span in spans:
                er = engine_request(span)
                if er is not None:
                    self._kept[er.trace_id] = er
            while len(self._kept) > MAX_KEPT:
                self._kept.popitem(last=False)
            self._cond.notify_all()

    @property
    def requests_kept(self) -> int:
        with self._cond:
            return len(self._kept)

    def wait_for(self, trace_ids: Iterable[str], timeout_s: float) -> dict[str, EngineRequest]:
        """The engine's times of these requests: what has come within ``timeout_s`` (an
        engine exports its spans in batches, every 5 s by default in vLLM)."""
        want = set(trace_ids)
        with self._cond:
            self._cond.wait_for(lambda: want.issubset(self._kept), timeout=timeout_s)
            return {t: self._kept[t] for t in want if t in self._kept}

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


# -- the median request's parts -----------------------------------------------------------


def median_request_parts(
    joined: Sequence[tuple[float, EngineRequest]], band: float = 0.05
) -> dict[str, Any] | None:
    """What the TTFT of the step's median request is made of.

    ``joined`` pairs each request's client TTFT with the engine's times of it. The requests
    whose TTFT is within ``band`` of the median (the middle one or two at least) are
    averaged part by part: their parts add up to their own TTFT, the median within the
    band. A band by rank would not do: past a knee, neighbours in rank can be far apart."""
    rows = sorted(
        ((c, e) for c, e in joined if e.queue_s is not None and e.prefill_s is not None),
        key=lambda x: x[0],
    )
    n = len(rows)
    if n == 0:
        return None
    middle = rows[(n - 1) // 2 : n // 2 + 1]
    p50 = sum(c for c, _ in middle) / len(middle)
    mid = [(c, e) for c, e in rows if abs(c - p50) <= band * p50] or middle
    k = len(mid)
    client = sum(c for c, _ in mid) / k
    queue = sum(e.queue_s for _, e in mid) / k  # type: ignore[misc]
    prefill = sum(e.prefill_s for _, e in mid) / k  # type: ignore[misc]
    engine = sum(e.ttft_s for _, e in mid) / k
    return {
        "queue_s": round(queue, 6),
        # From arrival to the queue (the API server, tokenising) and whatever else of the
        # engine's TTFT is in neither part.
        "engine_other_s": round(max(0.0, engine - queue - prefill), 6),
        "prefill_s": round(prefill, 6),
        "outside_s": round(max(0.0, client - engine), 6),
        "ttft_s": round(client, 6),
        "requests": k,
        "joined": n,
    }
