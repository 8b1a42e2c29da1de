"""py-spy's raw stacks become per-thread function shares, as a user reads them."""

from __future__ import annotations

from monitor.profiling.hot_path import DETOKENISE, SCHEDULE, classify, dominant, fix_for
from monitor.profiling.stacks import aggregate, parse, parse_line

# What py-spy 0.4.3 wrote here (record --format raw --threads --function --subprocesses).
RAW = """\
process 6529:"python parent.py";process 6531:"python burn.py";thread (6532): EngineCore;Thread.run (threading.py:971);loop (burn.py:8);detokenize (vllm/v1/engine/detokenizer.py:120) 60
process 6529:"python parent.py";process 6531:"python burn.py";thread (6532): EngineCore;Thread.run (threading.py:971);loop (burn.py:8);Scheduler.schedule (vllm/v1/core/sched/scheduler.py:200);helper (burn.py:30) 30
process 6529:"python parent.py";process 6531:"python burn.py";thread (6532): EngineCore;Thread.run (threading.py:971);loop (burn.py:8) 10
process 6529:"python parent.py";thread (6529): MainThread;<module> (parent.py:3) 5
"""


def test_a_line_names_process_thread_and_frames() -> None:
    s = parse_line(
        'process 12:"python -m x; y";thread (15): EngineCore;f (a/b.py:10);g (a/c.py:20) 73'
    )
    assert s is not None
    assert (s.pid, s.tid, s.thread, s.count) == (12, 15, "EngineCore", 73)
    assert s.frames == (("f", "a/b.py", 10), ("g", "a/c.py", 20))


def test_a_thread_without_name_or_process_frames_parses() -> None:
    s = parse_line("thread (5039);loop (burn.py:10) 3")
    assert s is not None and s.thread == "" and s.pid is None and s.tid == 5039
    assert parse_line("py-spy> Wrote raw flamegraph data") is None


def test_shares_are_per_thread_self_and_inclusive() -> None:
    threads = aggregate(parse(RAW), classify)
    busy = threads[0]
    assert (busy.pid, busy.tid, busy.thread, busy.samples) == (6531, 6532, "EngineCore", 100)
    top = {f.function: f for f in busy.functions}
    assert top["detokenize"].self_share == 0.6 and top["detokenize"].file.endswith("detokenizer.py")
    assert top["detokenize"].line == 120
    assert top["helper"].self_share == 0.3
    # schedule never sits on top of the stack, but 30% of samples pass through it.
    incl = {f.function: f for f in busy.inclusive}
    assert incl["Scheduler.schedule"].total_share == 0.3
    assert incl["Scheduler.schedule"].self_share == 0.0
    assert incl["loop"].total_share == 1.0
    assert [t.thread for t in threads] == ["EngineCore", "MainThread"]


def test_a_recursive_function_counts_once_per_sample() -> None:
    threads = aggregate(parse("thread (1): T;f (a.py:1);f (a.py:1);f (a.py:1) 4\n"))
    (f,) = threads[0].inclusive
    assert f.total_share == 1.0 and f.self_share == 1.0


def test_the_innermost_kind_decides_and_names_the_fix() -> None:
    busy = aggregate(parse(RAW), classify)[0]
    kinds = dict(busy.kinds)
    assert kinds[DETOKENISE] == 0.6 and kinds[SCHEDULE] == 0.3
    assert dominant(busy.kinds) == (DETOKENISE, 0.6)
    assert "--api-server-count" in fix_for(busy.kinds, busy.functions)


def test_no_dominant_kind_falls_back_to_the_top_frames() -> None:
    threads = aggregate(parse("thread (1): T;a (x.py:1) 5\nthread (1): T;b (y.py:2) 5\n"), classify)
    fix = fix_for(threads[0].kinds, threads[0].functions)
    assert "no single kind" in fix and "50% in a (x.py:1)" in fix


def test_vllm_function_names_are_classified() -> None:
    assert classify("Scheduler.schedule", "vllm/v1/core/sched/scheduler.py") == SCHEDULE
    assert classify("IncrementalDetokenizer.update", "vllm/v1/engine/detokenizer.py") == DETOKENISE
    assert classify("Sampler.forward", "vllm/v1/sample/sampler.py") == "sample"
    assert classify("encode", "transformers/tokenization_utils_fast.py") == "tokenise"
    assert classify("forward", "vllm/model_executor/models/llama.py") is None


def test_a_command_line_with_newlines_does_not_split_the_stack() -> None:
    raw = 'process 9:"python -c import time\nwhile True:\n    f()";thread (10);<module> (<string>:1) 99\n'
    (s,) = parse(raw)
    assert (s.pid, s.tid, s.count) == (9, 10, 99)


def test_unescaped_quotes_in_a_command_line_are_read() -> None:
    # What py-spy wrote for vLLM started with --profiler-config '{"profiler": "torch"}'.
    raw = (
        'process 20029:"python -m vllm.entrypoints.openai.api_server --profiler-config '
        '{"profiler": "torch", "torch_profiler_dir": "/tmp/t"}";process 20256:"VLLM::EngineCore";'
        "thread (20256): VLLM::EngineCor;run_busy_loop (vllm/v1/engine/core.py:900) 12\n"
    )
    (s,) = parse(raw)
    assert (s.pid, s.tid, s.thread) == (20256, 20256, "VLLM::EngineCor")
    assert s.frames == (("run_busy_loop", "vllm/v1/engine/core.py", 900),)
