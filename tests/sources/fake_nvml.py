"""A fake ``pynvml`` module for tests and benchmarks: the library boundary, nothing above it.

It borrows constants, error classes and ctypes structures from the real
nvidia-ml-py (importing it needs no driver) and simulates the devices behind
them: driver utilisation samples on a 200 ms period, GPM sample buffers that
must be filled and passed in order, MIG instances, and fields that answer
NVMLError_NotSupported. It counts every call so tests can assert how the source
used the library.
"""

from __future__ import annotations

import ctypes
import itertools
import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml

MIB = 1024 * 1024
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
H200_READINGS = FIXTURES / "h200-nvml-gpm-readings.json"
SAMPLE_PERIOD_US = 200_000  # the H200 driver's utilisation sample period

GPM_NAMES = {
    getattr(pynvml, n): n.removeprefix("NVML_GPM_METRIC_")
    for n in dir(pynvml)
    if n.startswith("NVML_GPM_METRIC_") and n != "NVML_GPM_METRIC_MAX"
}


@dataclass(eq=False)
class FakeGpu:
    """One simulated device. Percent values as NVML reports them."""

    name: str = "NVIDIA H200"
    uuid: str = ""
    memory_total: int = 143771 * MIB
    memory_used: int = 600 * MIB
    power_mw: int = 121_663
    power_limit_mw: int = 700_000
    sm_clock_mhz: int = 1980
    sm_clock_max_mhz: int = 1980
    temperature: int = 33
    throttle_mask: int = 0
    # Point read (nvmlDeviceGetUtilizationRates): the driver's last sample only.
    util_point: tuple[int, int] = (0, 0)
    # Values the driver samples each period, cycled: [0, 0, 0, 0, 50] is a 50 ms burst every second.
    util_pattern: list[int] = field(default_factory=lambda: [0])
    mem_pattern: list[int] = field(default_factory=lambda: [0])
    samples_supported: bool = True
    gpm: bool = True
    # GPM metric name (e.g. "SM_UTIL") -> value over the last interval; a list is cycled per sample.
    gpm_values: dict[str, Any] = field(default_factory=dict)
    gpm_unsupported: set[str] = field(default_factory=set)
    # pynvml function names that answer NVMLError_NotSupported on this device.
    unsupported: set[str] = field(default_factory=set)
    # Function names that answer NVMLError_GpuIsLost.
    lost: set[str] = field(default_factory=set)
    mig_enabled: bool = False
    mig_slots: int = 7
    migs: dict[int, FakeGpu] = field(default_factory=dict)  # slot -> instance
    gpu_instance_id: int | None = None
    # Processes: PID -> GPU memory (compute contexts), and graphics contexts likewise.
    compute_procs: dict[int, int] = field(default_factory=dict)
    graphics_procs: dict[int, int] = field(default_factory=dict)
    # PID -> (SM %, memory %) the driver samples for it every period while it runs kernels;
    # a listed PID absent here runs none (the driver then keeps no sample for it).
    proc_util: dict[int, tuple[int, int]] = field(default_factory=dict)
    proc_util_supported: bool = True
    # The driver's total energy counter (mJ since it loaded): grows by power x time as
    # advance() lets time pass; None: the device has none (answers not supported).
    energy_mj: int | None = 5_000_000
    # Simulation state.
    samples: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    gpm_seq: int = 0


def workload_gpu(run: str, **overrides: Any) -> FakeGpu:
    """A fake H200 whose readings come from the real H200 fixture's ``run``."""
    data = json.loads(H200_READINGS.read_text())["runs"][run]["window_1s"]
    first = data[0]
    gpm_values = {
        k: [row[k] for row in data] for k in first if k.isupper() and all(k in r for r in data)
    }
    kwargs: dict[str, Any] = dict(
        util_point=(first["nvml_util_gpu"], first.get("nvml_util_mem", 0)),
        util_pattern=[first["nvml_util_gpu"]],
        mem_pattern=[first.get("nvml_util_mem", 0)],
        power_mw=int(first["power_w"] * 1000),
        sm_clock_mhz=first["sm_clock"],
        gpm_values=gpm_values,
    )
    kwargs.update(overrides)
    return FakeGpu(**kwargs)


def t4_gpu(**overrides: Any) -> FakeGpu:
    """A Turing T4: NVML fields, no GPM, no MIG."""
    kwargs: dict[str, Any] = dict(
        name="Tesla T4",
        memory_total=15360 * MIB,
        power_mw=28_000,
        power_limit_mw=70_000,
        sm_clock_mhz=1590,
        sm_clock_max_mhz=1590,
        gpm=False,
        util_pattern=[40],
        util_point=(40, 10),
    )
    kwargs.update(overrides)
    return FakeGpu(**kwargs)


SM_CLOCK = (pynvml.NVML_CLOCK_SM,)  # the one clock the source asks for
GPU_SENSOR = (pynvml.NVML_TEMPERATURE_GPU,)  # and the one sensor


def _field(fn: str, attr: str, args: tuple[int, ...] = ()) -> Callable[..., Any]:
    """An NVML device query answering the fake GPU's attr, after _enter's counting and faults;
    args is what the source must pass after the handle."""

    def query(self: FakeNvml, h: FakeGpu, *given: int) -> Any:
        self._enter(fn, h)
        assert given == args, (fn, given)
        return getattr(h, attr)

    query.__name__ = fn
    return query


class FakeNvml:
    """Stands in for the ``pynvml`` module; pass it as ``NvmlSource(nvml=...)``."""

    NVMLError = pynvml.NVMLError
    c_nvmlGpmMetricsGet_t = pynvml.c_nvmlGpmMetricsGet_t

    def __init__(self, gpus: list[FakeGpu], init_error: int | None = None) -> None:
        for n in dir(pynvml):
            if n.startswith(("NVML_", "NVMLError_")):
                setattr(self, n, getattr(pynvml, n))
        self.gpus = gpus
        self.init_error = init_error
        self.calls: Counter[str] = Counter()
        self.metrics_get_calls: Counter[str] = Counter()  # uuid -> calls
        self.metrics_requested: list[int] = []  # numMetrics of each nvmlGpmMetricsGet
        self.gpm_allocs = 0
        self.gpm_frees = 0
        self.initialised = False
        self.now_us = 10_000_000
        self._buffers: dict[int, tuple[FakeGpu, int] | None] = {}
        self._addr = itertools.count(0x1000, 0x10)
        for i, gpu in enumerate(gpus):
            gpu.uuid = gpu.uuid or f"GPU-{i:08d}-fake"
            for slot, mig in gpu.migs.items():
                mig.uuid = mig.uuid or f"MIG-{i}-{slot}-fake"
                if mig.gpu_instance_id is None:
                    mig.gpu_instance_id = slot + 1
        self.advance(1.0)  # the driver has some history before anyone asks

    # -- simulation ---------------------------------------------------------------

    def _all(self) -> list[FakeGpu]:
        return [d for g in self.gpus for d in (g, *g.migs.values())]

    def advance(self, seconds: float) -> None:
        """Let time pass: every device records one driver sample per 200 ms."""
        end = self.now_us + int(seconds * 1e6)
        t = self.now_us
        for gpu in self._all():
            if gpu.energy_mj is not None:
                gpu.energy_mj += int(gpu.power_mw * seconds)
        while t + SAMPLE_PERIOD_US <= end:
            t += SAMPLE_PERIOD_US
            for gpu in self._all():
                for kind, pattern in (
                    (pynvml.NVML_GPU_UTILIZATION_SAMPLES, gpu.util_pattern),
                    (pynvml.NVML_MEMORY_UTILIZATION_SAMPLES, gpu.mem_pattern),
                ):
                    ring = gpu.samples.setdefault(kind, [])
                    ring.append((t, pattern[(t // SAMPLE_PERIOD_US) % len(pattern)]))
                    del ring[:-100]  # the driver keeps a bounded history
                for pid, (sm, mem) in gpu.proc_util.items():
                    ring = gpu.samples.setdefault(-pid, [])
                    ring.append((t, sm * 1000 + mem))
                    del ring[:-100]
        self.now_us = end

    def _enter(self, fn: str, gpu: FakeGpu | None = None) -> None:
        self.calls[fn] += 1
        if not self.initialised:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNINITIALIZED)
        if gpu is not None and fn in gpu.unsupported:
            raise pynvml.NVMLError_NotSupported()
        if gpu is not None and fn in gpu.lost:
            raise pynvml.NVMLError_GpuIsLost()

    # -- init -----------------------------------------------------------------------

    def nvmlInit(self) -> None:
        self.calls["nvmlInit"] += 1
        if self.init_error is not None:
            raise pynvml.NVMLError(self.init_error)
        self.initialised = True

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")
        self.initialised = False

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        self._enter("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self.gpus):
            raise pynvml.NVMLError_InvalidArgument()
        return self.gpus[index]

    # -- static facts ---------------------------------------------------------------

    nvmlDeviceGetUUID = _field("nvmlDeviceGetUUID", "uuid")
    nvmlDeviceGetName = _field("nvmlDeviceGetName", "name")
    nvmlDeviceGetMaxClockInfo = _field("nvmlDeviceGetMaxClockInfo", "sm_clock_max_mhz", SM_CLOCK)
    nvmlDeviceGetEnforcedPowerLimit = _field("nvmlDeviceGetEnforcedPowerLimit", "power_limit_mw")

    def nvmlDeviceGetMigMode(self, h: FakeGpu) -> list[int]:
        self._enter("nvmlDeviceGetMigMode", h)
        mode = pynvml.NVML_DEVICE_MIG_ENABLE if h.mig_enabled else pynvml.NVML_DEVICE_MIG_DISABLE
        return [mode, mode]

    def nvmlDeviceGetMaxMigDeviceCount(self, h: FakeGpu) -> int:
        self._enter("nvmlDeviceGetMaxMigDeviceCount", h)
        return h.mig_slots if h.mig_enabled else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: FakeGpu, slot: int) -> FakeGpu:
        self._enter("nvmlDeviceGetMigDeviceHandleByIndex", h)
        if slot not in h.migs:
            raise pynvml.NVMLError_NotFound()
        return h.migs[slot]

    def nvmlDeviceGetGpuInstanceId(self, h: FakeGpu) -> int:
        self._enter("nvmlDeviceGetGpuInstanceId", h)
        if h.gpu_instance_id is None:
            raise pynvml.NVMLError_InvalidArgument()
        return h.gpu_instance_id

    # -- hot fields -----------------------------------------------------------------

    def nvmlDeviceGetMemoryInfo(self, h: FakeGpu) -> SimpleNamespace:
        self._enter("nvmlDeviceGetMemoryInfo", h)
        return SimpleNamespace(
            total=h.memory_total, used=h.memory_used, free=h.memory_total - h.memory_used
        )

    nvmlDeviceGetPowerUsage = _field("nvmlDeviceGetPowerUsage", "power_mw")

    def nvmlDeviceGetTotalEnergyConsumption(self, h: FakeGpu) -> int:
        self._enter("nvmlDeviceGetTotalEnergyConsumption", h)
        # A MIG instance has no counter of its own (the GPU's counts all its instances).
        if h.energy_mj is None or h.gpu_instance_id is not None:
            raise pynvml.NVMLError_NotSupported()
        return h.energy_mj

    nvmlDeviceGetClockInfo = _field("nvmlDeviceGetClockInfo", "sm_clock_mhz", SM_CLOCK)
    nvmlDeviceGetCurrentClocksEventReasons = _field(
        "nvmlDeviceGetCurrentClocksEventReasons", "throttle_mask"
    )
    nvmlDeviceGetTemperature = _field("nvmlDeviceGetTemperature", "temperature", GPU_SENSOR)

    def nvmlDeviceGetUtilizationRates(self, h: FakeGpu) -> SimpleNamespace:
        self._enter("nvmlDeviceGetUtilizationRates", h)
        return SimpleNamespace(gpu=h.util_point[0], memory=h.util_point[1])

    def nvmlDeviceGetSamples(self, h: FakeGpu, kind: int, since: int) -> tuple[int, list[Any]]:
        self._enter("nvmlDeviceGetSamples", h)
        if not h.samples_supported:
            raise pynvml.NVMLError_NotSupported()
        newer = [(t, v) for t, v in h.samples.get(kind, []) if t > since]
        if not newer:
            raise pynvml.NVMLError_NotFound()  # what the driver says when nothing is new
        out = []
        for t, v in newer:
            s = pynvml.c_nvmlSample_t()
            s.timeStamp = t
            s.sampleValue.uiVal = v
            out.append(s)
        return pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, out

    # -- processes ------------------------------------------------------------------

    def _procs(self, procs: dict[int, int]) -> list[SimpleNamespace]:
        return [
            SimpleNamespace(pid=pid, usedGpuMemory=mem, gpuInstanceId=0xFFFFFFFF)
            for pid, mem in procs.items()
        ]

    def nvmlDeviceGetComputeRunningProcesses(self, h: FakeGpu) -> list[SimpleNamespace]:
        self._enter("nvmlDeviceGetComputeRunningProcesses", h)
        return self._procs(h.compute_procs)

    def nvmlDeviceGetGraphicsRunningProcesses(self, h: FakeGpu) -> list[SimpleNamespace]:
        self._enter("nvmlDeviceGetGraphicsRunningProcesses", h)
        return self._procs(h.graphics_procs)

    def nvmlDeviceGetProcessUtilization(self, h: FakeGpu, since: int) -> list[Any]:
        self._enter("nvmlDeviceGetProcessUtilization", h)
        if not h.proc_util_supported:
            raise pynvml.NVMLError_NotSupported()
        out = []
        for pid in h.proc_util:
            for t, v in h.samples.get(-pid, []):
                if t > since:
                    s = pynvml.c_nvmlProcessUtilizationSample_t()
                    s.pid, s.timeStamp, s.smUtil, s.memUtil = pid, t, v // 1000, v % 1000
                    out.append(s)
        if not out:
            raise pynvml.NVMLError_NotFound()  # no process ran a kernel since
        return out

    # -- GPM ------------------------------------------------------------------------

    def nvmlGpmQueryDeviceSupport(self, h: FakeGpu) -> SimpleNamespace:
        self._enter("nvmlGpmQueryDeviceSupport", h)
        return SimpleNamespace(version=1, isSupportedDevice=1 if h.gpm else 0)

    def nvmlGpmSampleAlloc(self) -> Any:
        self._enter("nvmlGpmSampleAlloc")
        self.gpm_allocs += 1
        addr = next(self._addr)
        self._buffers[addr] = None
        return ctypes.cast(ctypes.c_void_p(addr), pynvml.c_nvmlGpmSample_t)

    def nvmlGpmSampleFree(self, buf: Any) -> None:
        self._enter("nvmlGpmSampleFree")
        addr = ctypes.cast(buf, ctypes.c_void_p).value
        if addr not in self._buffers:
            raise pynvml.NVMLError_InvalidArgument()
        del self._buffers[addr]
        self.gpm_frees += 1

    def _fill(self, gpu: FakeGpu, buf: Any) -> Any:
        addr = ctypes.cast(buf, ctypes.c_void_p).value
        if addr not in self._buffers:
            raise pynvml.NVMLError_InvalidArgument()
        gpu.gpm_seq += 1
        self._buffers[addr] = (gpu, gpu.gpm_seq)
        return buf

    def nvmlGpmSampleGet(self, h: FakeGpu, buf: Any) -> Any:
        self._enter("nvmlGpmSampleGet", h)
        if not h.gpm:
            raise pynvml.NVMLError_NotSupported()
        return self._fill(h, buf)

    def nvmlGpmMigSampleGet(self, h: FakeGpu, gpu_instance_id: int, buf: Any) -> Any:
        self._enter("nvmlGpmMigSampleGet", h)
        for mig in h.migs.values():
            if mig.gpu_instance_id == gpu_instance_id:
                return self._fill(mig, buf)
        raise pynvml.NVMLError_InvalidArgument()

    def nvmlGpmMetricsGet(self, req: Any) -> Any:
        self._enter("nvmlGpmMetricsGet")
        a = self._buffers.get(ctypes.cast(req.sample1, ctypes.c_void_p).value)
        b = self._buffers.get(ctypes.cast(req.sample2, ctypes.c_void_p).value)
        # The real call needs two filled samples of one device, the older one first.
        if a is None or b is None or a[0] is not b[0] or a[1] >= b[1]:
            raise pynvml.NVMLError_InvalidArgument()
        if req.version != pynvml.NVML_GPM_METRICS_GET_VERSION:
            raise pynvml.NVMLError_ArgumentVersionMismatch()
        gpu = b[0]
        self.metrics_get_calls[gpu.uuid] += 1
        self.metrics_requested.append(int(req.numMetrics))
        metrics = req.metrics
        for i in range(req.numMetrics):
            m = metrics[i]
            name = GPM_NAMES[m.metricId]
            if name in gpu.gpm_unsupported:
                m.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
                m.value = 0.0
                continue
            value = gpu.gpm_values.get(name, 0.0)
            if isinstance(value, list):  # one entry per interval, from the first
                value = value[(a[1] - 1) % len(value)]
            m.nvmlReturn = pynvml.NVML_SUCCESS
            m.value = float(value)
        return req
