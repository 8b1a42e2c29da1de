"""`headroom profile --vllm URL`: drives /start_profile and /stop_profile on a real HTTP
server on 127.0.0.1 that writes a torch-format trace on stop, as vLLM 0.32 does."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from test_trace import launch_bound_trace


class FakeVllm(ThreadingHTTPServer):
    trace_dir: Path
    profiler_on: bool
    calls: list[str]


class Handler(BaseHTTPRequestHandler):
    server: FakeVllm

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        self.server.calls.append(self.path)
        if not self.server.profiler_on:
            self.send_response(404)  # vLLM without its profiler has no such route
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if self.path == "/stop_profile":
            stamp = time.time_ns()
            (self.server.trace_dir / f"rank0.{stamp}.pt.trace.json.gz").write_bytes(
                gzip.compress(json.dumps(launch_bound_trace()).encode())
            )
            # The API server's own trace: Python functions only, nothing to summarise.
            (self.server.trace_dir / f"vm_1.async_llm.{stamp}.pt.trace.json.gz").write_bytes(
                gzip.compress(b'{"traceEvents": []}')
            )
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()


@pytest.fixture
def fake_vllm(tmp_path: Path) -> Iterator[FakeVllm]:
    server = FakeVllm(("127.0.0.1", 0), Handler)
    server.trace_dir, server.profiler_on, server.calls = tmp_path, True, []
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    yield server
    server.shutdown()
    server.server_close()


def profile(server: FakeVllm, *extra: str) -> subprocess.CompletedProcess:
    url = f"http://127.0.0.1:{server.server_address[1]}"
    return subprocess.run(
        [sys.executable, "-m", "headroom", "profile", "--vllm", url, "--seconds", "0.5", *extra],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_profile_starts_stops_and_summarises_the_workers_trace(fake_vllm: FakeVllm) -> None:
    proc = profile(fake_vllm, "--trace-dir", str(fake_vllm.trace_dir))
    assert proc.returncode == 0, proc.stderr
    assert fake_vllm.calls == ["/start_profile", "/stop_profile"]
    out = proc.stdout
    assert "8 kernels, 2 engine steps; per step: 4 kernels (median), step 100 us" in out
    assert "median kernel 5.0 us; no kernel running 75% of a step" in out
    assert "elementwise_add" in out and "gemm" in out
    assert "skipped: trace" in out and "async_llm" in out


def test_a_vllm_without_its_profiler_says_how_to_turn_it_on(fake_vllm: FakeVllm) -> None:
    fake_vllm.profiler_on = False
    proc = profile(fake_vllm, "--trace-dir", str(fake_vllm.trace_dir))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert "vLLM's profiler is off" in line and "--profiler-config" in line
    assert "torch_profiler_dir" in line


def test_without_a_trace_directory_it_asks_for_one(fake_vllm: FakeVllm) -> None:
    proc = profile(fake_vllm)  # this test process's command line names no trace directory
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "give --trace-dir DIR" in proc.stderr
    assert fake_vllm.calls == []  # refused before the profiler was started


def test_the_trace_directory_is_read_from_vllms_command_line() -> None:
    from monitor.profiling.vllm_profiler import dir_from_cmdline

    argv = ["python", "-m", "vllm.entrypoints.openai.api_server", "--profiler-config",
            '{"profiler": "torch", "torch_profiler_dir": "/tmp/traces"}']  # fmt: skip
    assert dir_from_cmdline(argv, {}) == "/tmp/traces"
    assert dir_from_cmdline(["vllm", "--profiler-config.torch_profiler_dir=/x"], {}) == "/x"
    assert dir_from_cmdline(["vllm"], {"VLLM_TORCH_PROFILER_DIR": "/old"}) == "/old"
