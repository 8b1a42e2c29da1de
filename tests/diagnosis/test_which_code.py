"""Which code: the cpu-bound verdict names the hot thread's functions and takes its fix from
them; GPU verdicts carry the next command for a profiler that sees kernels, with the PID."""

from __future__ import annotations

import dataclasses
import json

from diag_windows import gpu, make_window

from monitor.diagnosis import Caps, diagnose
from monitor.profiling.hot_path import classify
from monitor.profiling.pyspy import build_profile
from monitor.watch.report import build_report, render_text

CPU_BOUND = dict(
    gpus=[gpu(0.3, 0.27, 0.2, 0.2)],
    engine=dict(running=40, rps=4.0, e2e_s=10.0, steps_per_s=25, tokens_per_step=40),
    host=dict(thread=1.0, busy=0.2),
)
RAW = (
    "thread (101): EngineCore;run_busy_loop (vllm/v1/engine/core.py:800);"
    "Scheduler.schedule (vllm/v1/core/sched/scheduler.py:200) 55\n"
    "thread (101): EngineCore;run_busy_loop (vllm/v1/engine/core.py:800);"
    "Sampler.forward (vllm/v1/sample/sampler.py:60) 25\n"
    "thread (101): EngineCore;run_busy_loop (vllm/v1/engine/core.py:800) 20\n"
)


def test_cpu_bound_names_the_top_functions_and_the_fix_follows_from_them() -> None:
    window = make_window(**CPU_BOUND)
    prof = build_profile(RAW, 100, 5.0, 50, want_tid=101)
    assert dict(prof.kinds)["schedule"] == 0.55 and classify("x", "y") is None
    window = dataclasses.replace(window, cpu_profile=prof)
    d = diagnose(window, caps=Caps(max_num_seqs=64))
    v = next(v for v in d.verdicts if v.cause == "cpu-bound")
    assert (
        "EngineCore thread: 55% in Scheduler.schedule (vllm/v1/core/sched/scheduler.py:200)"
        in v.summary
    )
    assert v.fix.startswith("scheduling dominates: overlap it with the GPU step")
    assert "--async-scheduling" in v.fix
    report = build_report(window, d.verdicts, d.analyses)
    (entry,) = [e for e in report["verdicts"][0]["evidence"] if e["name"] == "cpu_profile"]
    assert entry["profile"]["functions"][0]["function"] == "Scheduler.schedule"
    assert report["engines"][0]["cpu_profile"]["thread"] == "EngineCore"
    json.dumps(report)  # JSON-able all the way
    text = render_text(report)
    assert "cpu profile: EngineCore (pid 100, tid 101)" in text
    assert "55%    55%  Scheduler.schedule (vllm/v1/core/sched/scheduler.py:200)" in text


def test_without_a_profile_the_verdict_and_json_say_none() -> None:
    window = make_window(**CPU_BOUND)
    d = diagnose(window, caps=Caps(max_num_seqs=64))
    v = next(v for v in d.verdicts if v.cause == "cpu-bound")
    assert v.cpu_profile is None and "overlap scheduling" in v.fix
    report = build_report(window, d.verdicts, d.analyses)
    assert report["engines"][0]["cpu_profile"] is None
    assert not [e for e in report["verdicts"][0]["evidence"] if e["name"] == "cpu_profile"]


def test_a_gpu_verdict_carries_the_kernel_profiler_commands_for_this_box() -> None:
    window = make_window(
        gpus=[gpu(0.9, 0.05)],
        engine=dict(running=8, rps=1.0, e2e_s=8.0),
        host=dict(thread=0.3, busy=0.2),
    )
    d = diagnose(window, caps=Caps(max_num_seqs=64))
    v = next(v for v in d.verdicts if v.cause == "launch-bound")
    pid = window.host.busiest_thread.pid
    assert f"headroom profile --vllm {window.engines[0].url.removesuffix('/metrics')}" in v.next
    assert "nsys profile" in v.next and f"PID {pid}" in v.next
    assert build_report(window, d.verdicts, d.analyses)["verdicts"][0]["next"] == v.next
