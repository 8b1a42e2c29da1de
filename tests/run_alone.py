"""The tests `make test` runs one at a time: tests/conftest.py marks them `serial` and
tests/docs/test_commands.py checks each entry (a module of its own, as in a whole-suite run a
folder's own conftest.py has taken the name `conftest`)."""

from __future__ import annotations

# Tests that time things in real time or load both cores (real engines, sweeps, the
# simulator's pace, the client's own CPU): `make test` runs them one at a time, after the
# rest has run two at a time (pytest-xdist), so that no other test shares the machine with
# them. A file is named here rather than marked in place so that the split is seen whole.
SERIAL = (
    "tests/vllm/",
    "tests/llamacpp/",
    "tests/e2e/",
    "tests/loadgen/test_sweep_",
    "tests/loadgen/test_tune_sim.py",
    "tests/loadgen/test_lg_send_promptly.py",
    "tests/loadgen/test_lg_stream_reader.py",
    "tests/loadgen/test_lg_worker_loop.py",
    "tests/loadgen/test_lg_stall.py",
    "tests/simulator/test_realtime.py",
    "tests/simulator/test_tensor_parallel.py",
    "tests/agent/test_faults.py",
)
