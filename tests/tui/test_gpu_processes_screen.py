"""The GPU screen's process table, driven by Textual's pilot over a live sampler."""

from __future__ import annotations

import pytest
from tui_helpers import open_screen, wait_frames

from monitor.read.sampler import Sampler
from monitor.sources.base import Reading
from monitor.sources.samples import GpuProcess, GpuSample, HostSample, ProcessCpu
from monitor.tui.app import HeadroomApp
from monitor.tui.feeds import LocalFeed
from monitor.tui.screens import GpuDetailScreen
from monitor.watch.pipeline import Monitor

pytestmark = pytest.mark.anyio
GIB = 2**30


class SharedGpuSource:
    """The H200 run's GPU 0: the engine's matmul (pid 529), a rival in a pod, an idle holder
    in a docker container, and a PID from another PID namespace."""

    name = "shared"

    def __init__(self) -> None:
        self.t = 0.0

    def read(self) -> Reading:
        self.t += 1.0
        procs = (
            GpuProcess(529, GIB, 0.36, user="root", command="python workloads.py matmul"),
            GpuProcess(530, 9 * GIB, 0.64, user="1000", command="python train.py",
                       container="3f4e5d6c7b8a", runtime="containerd",
                       pod="trainer-0", namespace="batch"),
            GpuProcess(531, 612 * 2**20, 0.0, user="root", command="python workloads.py idle",
                       container="aaaabbbbcccc", runtime="docker"),
            GpuProcess(48213, 2 * GIB, 0.0, visible=False),
        )  # fmt: skip
        gpu = GpuSample(0, "GPU-0", "NVIDIA H200", "nvml", util=0.999, sm_active=0.882,
                        tensor_active=0.812, dram_active=0.168, memory_used_bytes=13 * GIB,
                        memory_total_bytes=140 * GIB, processes=procs)  # fmt: skip
        host = HostSample(
            16, 16 * self.t, 14 * self.t, processes=(ProcessCpu(529, "python", self.t),)
        )
        return Reading(gpus=(gpu,), host=host)

    def close(self) -> None:
        pass


async def test_the_gpu_screen_lists_who_holds_the_gpu() -> None:
    sampler = Sampler([SharedGpuSource()], interval=0.2)
    app = HeadroomApp(LocalFeed(Monitor(sampler, window_s=1.0)))
    async with app.run_test(size=(120, 60)) as pilot:
        await wait_frames(app, pilot, 3)
        text = await open_screen(app, pilot, GpuDetailScreen, "g")
        assert "processes" in text
        lines = {ln.split()[0]: ln for ln in text.splitlines() if ln.strip()[:1].isdigit()}
        assert "engine" in lines["529"] and "36%" in lines["529"]
        assert (
            "other" in lines["530"] and "batch/trainer-0" in lines["530"] and "64%" in lines["530"]
        )
        assert "aaaabbbbcccc" in lines["531"] and " 0%" in lines["531"]
        assert "not visible" in lines["48213"] and "another PID namespace" in lines["48213"]
        # The engine's row comes first, and the verdict under the table says why it matters.
        order = [k for k in lines if k in {"529", "530", "531", "48213"}]
        assert order[0] == "529"
        assert "Contended" in text
        await pilot.press("q")
