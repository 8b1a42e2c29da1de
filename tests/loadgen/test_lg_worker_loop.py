"""The worker process end to end: what each request carries, and users that loop on their own.

The worker builds each request's JSON from parts encoded once a run and runs a closed
loop's requests back to back inside one Locust task; these tests run the real worker
process (importing locust patches the process for gevent) against a small HTTP server
here that keeps every request body it is sent.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from loadgen.records import RecordTail, RequestRecord, WorkerStatus
from loadgen.schema import WorkerConfig

ROOT = Path(__file__).resolve().parents[2]
TOKENS = 3


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *_args: object) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.bodies.append((self.path, body))  # type: ignore[attr-defined]
        chat = self.path.endswith("/chat/completions")
        events = []
        for i in range(TOKENS):
            choice = {"index": 0, "delta": {"content": f" t{i}"}} if chat else {"index": 0, "text": f" t{i}"}  # fmt: skip
            events.append(b"data: " + json.dumps({"id": "cmpl-1", "choices": [choice]}).encode())
        events.append(b"data: [DONE]")
        out = b"\n\n".join(events) + b"\n\n"
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)


@pytest.fixture()
def server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    srv.daemon_threads = True
    srv.bodies = []  # type: ignore[attr-defined]
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv
    srv.shutdown()
    srv.server_close()


def _run_worker(tmp: Path, cfg: WorkerConfig, users: int, until) -> list:  # type: ignore[no-untyped-def]
    """Run a closed-loop worker with ``users`` until ``until(items)`` holds (or 60 s); its lines."""
    (tmp / "cfg.json").write_text(cfg.model_dump_json())
    records = tmp / "records.jsonl"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    items: list = []
    with (tmp / "stderr").open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "loadgen.worker_locust", "--mode", "closed",
             "--config", str(tmp / "cfg.json"), "--records", str(records)],
            stdin=subprocess.PIPE, stderr=err, cwd=ROOT, env=env,
        )  # fmt: skip
    assert proc.stdin is not None
    try:
        proc.stdin.write(json.dumps({"cmd": "step", "step": 0, "concurrency": users}).encode() + b"\n")  # fmt: skip
        proc.stdin.flush()
        tail = RecordTail(records)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not until(items):
            time.sleep(0.1)
            if records.exists():
                items += list(tail.read_new())
        proc.stdin.write(b'{"cmd":"stop"}\n')
        proc.stdin.close()
        # The worker answers its stop command: no user kept the hub from reading stdin.
        assert proc.wait(timeout=30) == 0, (tmp / "stderr").read_text()[-2000:]
        items += list(tail.read_new())
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return items


def _done(n: int):  # type: ignore[no-untyped-def]
    return lambda items: sum(isinstance(r, RequestRecord) for r in items) >= n


@pytest.mark.parametrize("api", ["completions", "chat"])
@pytest.mark.parametrize("extras", [False, True])
def test_each_request_carries_the_configured_fields(tmp_path: Path, server, api: str, extras: bool) -> None:  # type: ignore[no-untyped-def]  # fmt: skip
    url = f"http://127.0.0.1:{server.server_address[1]}"
    cfg = WorkerConfig(target=url, model='m\u00e9-"1"', input_tokens=4, output_tokens=5,
                       api=api, include_usage=extras, ignore_eos=extras, dephase=False)  # fmt: skip
    items = _run_worker(tmp_path, cfg, 2, _done(6))
    recs = [r for r in items if isinstance(r, RequestRecord)]
    assert len(recs) >= 6 and all(r.ok and r.output_tokens == TOKENS for r in recs), recs[:3]
    bodies = list(server.bodies)
    assert len(bodies) >= 6
    prompts = set()
    for path, raw in bodies:
        assert path == ("/v1/chat/completions" if api == "chat" else "/v1/completions")
        body = json.loads(raw)
        want = {"model", "max_tokens", "stream", "messages" if api == "chat" else "prompt"}
        if extras:
            want |= {"stream_options", "ignore_eos"}
        assert set(body) == want, body
        assert body["model"] == 'm\u00e9-"1"' and body["max_tokens"] == 5 and body["stream"] is True
        if extras:
            assert body["stream_options"] == {"include_usage": True} and body["ignore_eos"] is True
        if api == "chat":
            assert [m["role"] for m in body["messages"]] == ["user"]
            prompts.add(body["messages"][0]["content"])
        else:
            prompts.add(body["prompt"])
    # Each request its own prompt (a random lead word), not one body sent again.
    assert len(prompts) > 1


def test_users_dropped_at_the_cap_keep_the_worker_answering(tmp_path: Path, server) -> None:  # type: ignore[no-untyped-def]  # fmt: skip
    """Requests dropped at the in-flight cap end without waiting on anything: the users'
    loop still yields between requests, so the one in flight is read, the status written
    and the stop command read."""
    url = f"http://127.0.0.1:{server.server_address[1]}"
    cfg = WorkerConfig(target=url, model="m", input_tokens=4, output_tokens=5,
                       max_in_flight=1, dephase=False)  # fmt: skip

    def enough(items: list) -> bool:
        ok = [r for r in items if isinstance(r, RequestRecord) and r.ok]
        return len(ok) >= 3 and sum(isinstance(s, WorkerStatus) for s in items) >= 3

    items = _run_worker(tmp_path, cfg, 3, enough)
    recs = [r for r in items if isinstance(r, RequestRecord)]
    assert sum(r.ok for r in recs) >= 3
    assert any(r.error and "in-flight cap" in r.error for r in recs)
    assert sum(isinstance(s, WorkerStatus) for s in items) >= 3
