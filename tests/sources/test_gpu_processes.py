"""The processes on each GPU through a fake pynvml: who holds it, how much memory and SM time,
read every few seconds rather than every tick, and what a container sees of host PIDs."""

from __future__ import annotations

import os

import pytest
from fake_nvml import MIB, FakeNvml, workload_gpu

from monitor.sources.gpu_processes import Identity, ProcessIdentities
from monitor.sources.nvml import NvmlSource


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def who(pid: int) -> Identity | None:
    if pid == 999_999:
        return None  # a host PID this (containerised) headroom cannot see
    return Identity("alice", f"python serve_{pid}.py", "3f4e5d6c7b8a", "docker", None, None, None)


def make(gpu: object, every: float = 5.0) -> tuple[NvmlSource, FakeNvml, Clock]:
    fake = FakeNvml([gpu])  # type: ignore[list-item]
    clock = Clock()
    src = NvmlSource(nvml=fake, clock=clock, processes_every_s=every, identities=who)
    return src, fake, clock


def tick(src: NvmlSource, fake: FakeNvml, clock: Clock, seconds: float = 1.0) -> object:
    fake.advance(seconds)
    clock.t += seconds
    return src.read().gpus[0]


def test_each_process_has_its_memory_sm_share_and_identity() -> None:
    gpu = workload_gpu(
        "matmul",
        compute_procs={4242: 60_000 * MIB, 5151: 9_000 * MIB, 999_999: 2_000 * MIB},
        proc_util={4242: (70, 40), 5151: (25, 5)},
    )
    src, fake, clock = make(gpu)
    tick(src, fake, clock)
    g = tick(src, fake, clock, 5.0)
    procs = {p.pid: p for p in g.processes}
    assert set(procs) == {4242, 5151, 999_999}
    assert procs[4242].memory_bytes == 60_000 * MIB
    assert procs[4242].sm_share == pytest.approx(0.70) and procs[4242].mem_share == pytest.approx(
        0.40
    )
    assert procs[5151].sm_share == pytest.approx(0.25)
    assert procs[4242].user == "alice" and procs[4242].container == "3f4e5d6c7b8a"
    # Listed, but the driver has no sample for it since the last read: no kernel ran.
    assert procs[999_999].sm_share == 0.0
    assert procs[999_999].visible is False and procs[999_999].command is None


def test_processes_are_read_every_few_seconds_not_every_tick() -> None:
    gpu = workload_gpu(
        "matmul", compute_procs={4242: 1 * MIB, 5151: 1 * MIB}, proc_util={4242: (50, 0)}
    )
    src, fake, clock = make(gpu, every=5.0)
    seen = [tick(src, fake, clock).processes for _ in range(10)]
    assert fake.calls["nvmlDeviceGetComputeRunningProcesses"] == 2  # at 0 s and at 5 s
    assert fake.calls["nvmlDeviceGetProcessUtilization"] == 2
    assert all(s is not None and s[0].pid == 4242 for s in seen)  # the last list carries over


def test_a_process_that_stops_running_kernels_reads_zero_then_leaves_the_list() -> None:
    gpu = workload_gpu(
        "matmul",
        compute_procs={4242: 1 * MIB, 5151: 1 * MIB},
        proc_util={4242: (90, 0), 5151: (5, 0)},
    )
    src, fake, clock = make(gpu, every=1.0)
    assert tick(src, fake, clock).processes[0].sm_share == pytest.approx(0.9)
    gpu.proc_util = {}
    tick(src, fake, clock)  # samples from before the change may still be in this read
    assert [p.sm_share for p in tick(src, fake, clock).processes] == [0.0, 0.0]
    gpu.compute_procs = {}
    assert tick(src, fake, clock).processes == ()


def test_a_process_alone_on_its_gpu_has_the_gpus_duty_cycle_without_asking_the_driver() -> None:
    gpu = workload_gpu("matmul", compute_procs={4242: 1 * MIB}, proc_util={4242: (20, 7)})
    src, fake, clock = make(gpu, every=1.0)
    tick(src, fake, clock)
    g = tick(src, fake, clock)
    (p,) = g.processes
    assert g.util is not None and g.util > 0.5
    assert (p.pid, p.sm_share, p.mem_share) == (4242, g.util, g.mem_util)
    assert fake.calls["nvmlDeviceGetProcessUtilization"] == 0
    gpu.compute_procs = {4242: 1 * MIB, 5151: 1 * MIB}  # a second process: asked again
    shares = {p.pid: p.sm_share for p in tick(src, fake, clock).processes}
    assert fake.calls["nvmlDeviceGetProcessUtilization"] == 1
    assert shares[4242] == pytest.approx(0.2) and shares[5151] == 0.0


def test_no_per_process_samples_means_no_share_not_zero() -> None:
    gpu = workload_gpu(
        "matmul", compute_procs={4242: 1 * MIB, 5151: 1 * MIB}, proc_util_supported=False
    )
    src, fake, clock = make(gpu)
    g = tick(src, fake, clock)
    assert g.processes[0].memory_bytes == 1 * MIB and g.processes[0].sm_share is None
    tick(src, fake, clock, 6.0)
    assert fake.calls["nvmlDeviceGetProcessUtilization"] == 1  # not supported: not asked again


def test_a_gpu_without_process_lists_reads_none() -> None:
    gpu = workload_gpu(
        "matmul",
        unsupported={
            "nvmlDeviceGetComputeRunningProcesses",
            "nvmlDeviceGetGraphicsRunningProcesses",
        },
    )
    src, fake, clock = make(gpu)
    assert tick(src, fake, clock).processes is None


def test_processes_off_by_default_in_the_source() -> None:
    fake = FakeNvml([workload_gpu("matmul", compute_procs={1: 1})])
    g = NvmlSource(nvml=fake).read().gpus[0]
    assert g.processes is None and fake.calls["nvmlDeviceGetComputeRunningProcesses"] == 0


def test_a_graphics_and_compute_context_of_one_process_is_one_row() -> None:
    gpu = workload_gpu("matmul", compute_procs={7: 100 * MIB}, graphics_procs={7: 100 * MIB, 8: 5})
    src, fake, clock = make(gpu)
    assert [(p.pid, p.memory_bytes) for p in tick(src, fake, clock).processes] == [
        (7, 100 * MIB),
        (8, 5),
    ]


def test_mig_instances_list_their_own_processes_and_carry_their_instance_id() -> None:
    migs = {
        0: workload_gpu("matmul", name="NVIDIA H200 MIG 3g.71gb", compute_procs={11: 5 * MIB},
                        proc_util_supported=False),
        2: workload_gpu("copy", name="NVIDIA H200 MIG 3g.71gb", compute_procs={22: 7 * MIB},
                        proc_util_supported=False),
    }  # fmt: skip
    for m in migs.values():
        m.unsupported |= {"nvmlDeviceGetPowerUsage"}
    fake = FakeNvml([workload_gpu("idle", mig_enabled=True, migs=migs)])
    clock = Clock()
    src = NvmlSource(nvml=fake, clock=clock, processes_every_s=5.0, identities=who)
    gpus = src.read().gpus
    assert [(g.mig_parent, g.mig_instance) for g in gpus] == [(None, None), (0, 1), (0, 3)]
    assert [[p.pid for p in g.processes] for g in gpus[1:]] == [[11], [22]]
    assert gpus[0].processes is None  # the split GPU: its instances' lists would count twice
    assert gpus[1].processes[0].sm_share is None


def test_real_lookup_of_this_test_process() -> None:
    """psutil and /proc/self/cgroup for real: this very process, user and command line."""
    ident = ProcessIdentities().identify(os.getpid())
    assert ident is not None
    assert ident.user and "python" in (ident.command or "").lower()
    assert ProcessIdentities().identify(2**22 + 12345) is None  # no such PID here
