"""The torch-profiler trace summary, on traces written in torch's Chrome-trace format.

The events follow what torch.profiler's export_chrome_trace writes (and what vLLM 0.32's
worker trace held here): complete events ("ph": "X") with ts and dur in microseconds,
cat "kernel" on the GPU's stream, "cuda_runtime" for cudaLaunchKernel with the same
args.correlation as its kernel, "user_annotation" for a record_function range.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from monitor.profiling.pyspy import ProfileError
from monitor.profiling.trace import summarise


def _step(i: int, ts: float, dur: float) -> dict:
    return {"ph": "X", "cat": "user_annotation", "name": f"execute_context_0(0)_generation_4({i})",
            "pid": 1, "tid": 1, "ts": ts, "dur": dur}  # fmt: skip


def _launch(corr: int, ts: float) -> dict:
    return {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
            "ts": ts, "dur": 4, "args": {"correlation": corr}}  # fmt: skip


def _kernel(corr: int, name: str, ts: float, dur: float) -> dict:
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur,
            "args": {"correlation": corr, "stream": 7, "device": 0}}  # fmt: skip


def launch_bound_trace() -> dict:
    """Two 100 us steps, each launching 4 kernels of 5 us (gemm 10 us) spread out: the GPU
    runs a kernel 25 us of each 100 us step."""
    events: list[dict] = [
        {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}}
    ]
    corr = 0
    for i, t0 in enumerate((1000.0, 1200.0)):
        events.append(_step(i, t0, 100.0))
        for j, (name, dur) in enumerate(
            (("elementwise_add", 5), ("elementwise_add", 5), ("gemm", 10), ("softmax", 5))
        ):
            corr += 1
            events.append(_launch(corr, t0 + 20 * j))
            events.append(_kernel(corr, name, t0 + 20 * j + 8, dur))
    return {"schemaVersion": 1, "traceEvents": events}


def test_kernels_per_step_median_duration_and_idle_share(tmp_path: Path) -> None:
    path = tmp_path / "rank0.1.pt.trace.json.gz"
    path.write_bytes(gzip.compress(json.dumps(launch_bound_trace()).encode()))
    s = summarise(path)
    assert s.kind == "kernels" and s.kernels == 8 and s.steps == 2
    assert s.kernels_per_step == 4
    assert s.median_kernel_us == 5
    assert s.idle_share == pytest.approx(0.75)
    assert s.step_median_us == 100
    top = {o.name: o for o in s.top}
    assert top["elementwise_add"].calls == 4 and top["elementwise_add"].share == pytest.approx(0.4)
    assert s.top[0].name in ("elementwise_add", "gemm")


def test_a_cpu_only_trace_ranks_ops_by_their_own_time(tmp_path: Path) -> None:
    events = [
        _step(0, 0, 100),
        {"ph": "X", "cat": "cpu_op", "name": "aten::linear", "pid": 1, "tid": 1, "ts": 0, "dur": 60},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 5, "dur": 50},
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 70, "dur": 20},
    ]  # fmt: skip
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    s = summarise(path)
    assert s.kind == "cpu ops" and s.kernels == 0
    own = {o.name: o.total_us for o in s.top}
    assert own == {"aten::mm": 50, "aten::add": 20, "aten::linear": 10}
    assert s.kernels_per_step == 3  # ops per step, on a CPU engine


@pytest.mark.parametrize(
    "content", [b"not json", b"\x1f\x8b\x08 truncated gzip", b'{"foo": 1}', b""]
)
def test_an_unreadable_trace_is_one_line_and_exit_1(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "bad.pt.trace.json"
    path.write_bytes(content)
    with pytest.raises(ProfileError, match="unreadable"):
        summarise(path)
    proc = subprocess.run(
        [sys.executable, "-m", "headroom", "profile", "--trace", str(path)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 1
    assert proc.stderr.startswith("headroom profile: trace ") and "unreadable" in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
