"""GPU readings straight from NVML (and its GPM metrics on Hopper and newer).

What a user sees when something is missing:

- No NVIDIA driver / no ``libnvidia-ml.so.1`` on the host: constructing the
  source raises ``SourceUnavailable("NVML library not found: no NVIDIA driver
  on this host")``; the command prints that one line and carries on with its
  other sources (vLLM, host).
- A driver but no GPU, or the driver not loaded: one line likewise.
- A GPU without GPM (anything older than Hopper, e.g. a T4 or an A100): it
  still reports util, memory, power, clocks, throttle reasons and temperature;
  ``sm_active``, ``sm_occupancy``, ``tensor_active``, ``dram_active``, FP16/FP32
  activity, PCIe and NVLink throughput are ``None`` (shown as a dash, omitted by
  the exporter), and ``notes`` carries one line per such GPU, e.g.
  ``GPU 0 (Tesla T4): no GPM (needs Hopper or newer); SM, tensor and DRAM
  activity unavailable -- use DCGM``.
- GPM asked off (``gpm=False``): the same ``None`` fields, without the note.
- The first tick after start: GPM needs two samples, so GPM fields (and util,
  on a GPM GPU) are ``None`` on the first reading only.
- A field one GPU does not support (a MIG instance has no power reading, some
  boards no temperature): ``None``, never 0, logged once, and not asked again.

The processes on each GPU (``processes_every_s`` > 0): the compute and graphics
process lists (PID, GPU memory) and the per-process SM and memory shares from
``nvmlDeviceGetProcessUtilization`` (the driver's samples since the previous
read; NOT_FOUND there means no process ran a kernel since). They are read once
every ``processes_every_s`` seconds, not every tick: the list changes when a
process starts or stops, and each PID is looked up (user, command, container)
through ``monitor.sources.gpu_processes``. Between reads a sample carries the
last list. A process alone on its GPU has the GPU's duty cycle for its SM share
(and the memory duty cycle, where read without GPM, for its memory share): the
per-process read costs ~1.9 ms of driver CPU on an H200, more than all of a
tick's other NVML calls together, to say what the GPU's own figures say when
only one process holds it. MIG instances list their own processes; the driver keeps no
per-process utilisation for them, so their ``sm_share`` is None; a GPU
split into instances lists none itself (its instances' lists would count twice).

Where util comes from: a point read (``nvmlDeviceGetUtilizationRates``) reports
only the driver's last sample period (200 ms on an H200), so under bursty work
it comes back 0 or 100 by luck (DESIGN.md, "Signals"). So:

- GPM GPUs: GPM ``GRAPHICS_UTIL``, the same duty cycle over exactly the tick,
  fetched in the one ``nvmlGpmMetricsGet`` call. On a real H200 it tracked the
  driver-sample mean within 0.01 under matmul, launch-bound, copy and bursty
  loads, while point reads of the bursty load said 1.00 or 0.00. ``mem_util`` is
  not read there (``dram_active`` measures the memory interface itself).
- Other GPUs: the mean of the driver's own samples since the previous tick
  (``nvmlDeviceGetSamples``).
- GPUs without driver samples: a point read, with a note saying it is noisy.

What it costs, measured per call on an H200 (driver 580): a point read 3-18 us;
``nvmlGpmSampleGet`` ~60 us; ``nvmlGpmMetricsGet`` ~15 us for the default
metrics, plus ~1.8 ms when ``GRAPHICS_UTIL`` is among them; ``nvmlDeviceGetSamples``
~2.4 ms whatever the start timestamp. So a GPM GPU costs ~2.4 ms of CPU per tick
and one read through driver samples (util and memory) ~5.7 ms.

This is the only module that imports ``pynvml`` (ruff's banned-api enforces it).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from monitor.core.errors import ConfigError, SourceUnavailable
from monitor.sources.base import Reading
from monitor.sources.energy import EnergyMeter
from monitor.sources.gpu_processes import Identity, ProcessIdentities
from monitor.sources.samples import GpuProcess, GpuSample, SourceError

log = logging.getLogger(__name__)

# GPM metric name -> (GpuSample field, scale to base units).
# Percent metrics become ratios 0-1. NVML documents the PCIe and NVLink per-second
# metrics as MiB/s (nvml.h: "PCIe traffic from this GPU in MiB/sec"), so x 2**20.
_MIB = 1024.0 * 1024.0
GPM_FIELDS: dict[str, tuple[str, float]] = {
    # The share of the interval with any work on the GPU: the duty cycle that
    # nvmlDeviceGetUtilizationRates samples, but over exactly this tick.
    "GRAPHICS_UTIL": ("util", 0.01),
    "SM_UTIL": ("sm_active", 0.01),
    "SM_OCCUPANCY": ("sm_occupancy", 0.01),
    "ANY_TENSOR_UTIL": ("tensor_active", 0.01),
    "DRAM_BW_UTIL": ("dram_active", 0.01),
    "FP16_UTIL": ("fp16_active", 0.01),
    "FP32_UTIL": ("fp32_active", 0.01),
    "PCIE_TX_PER_SEC": ("pcie_tx_bytes_per_s", _MIB),
    "PCIE_RX_PER_SEC": ("pcie_rx_bytes_per_s", _MIB),
    "NVLINK_TOTAL_TX_PER_SEC": ("nvlink_tx_bytes_per_s", _MIB),
    "NVLINK_TOTAL_RX_PER_SEC": ("nvlink_rx_bytes_per_s", _MIB),
}
DEFAULT_GPM_METRICS: tuple[str, ...] = tuple(GPM_FIELDS)

# Clock-event ("throttle") reason bits, as in nvml.h (nvmlClocksEventReason*).
THROTTLE_BITS: tuple[tuple[int, str], ...] = (
    (0x1, "idle"),
    (0x2, "applications_clocks"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal"),
    (0x40, "hw_thermal"),
    (0x80, "hw_power_brake"),
    (0x100, "display_clocks"),
)

# nvml.h return codes the source treats specially.
_NOT_SUPPORTED = 3
_NO_PERMISSION = 4
_NOT_FOUND = 6
_DRIVER_NOT_LOADED = 9
_LIBRARY_NOT_FOUND = 12
_FUNCTION_NOT_FOUND = 13
_GPU_IS_LOST = 15
# A field failing with one of these will fail the same way on every tick: stop asking.
_PERMANENT = {_NOT_SUPPORTED, _NO_PERMISSION, _FUNCTION_NOT_FOUND}

_SAMPLE_VALUE_ATTR = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal"}


def throttle_names(mask: int) -> tuple[str, ...]:
    """Names of the clock-event reasons set in an NVML bitmask."""
    return tuple(name for bit, name in THROTTLE_BITS if mask & bit)


@dataclass(eq=False)
class _Device:
    """One GPU or MIG instance: what was probed at start, and the state kept between ticks."""

    key: str  # "GPU 0" or "GPU 0 MIG 1": the target in logs and SourceErrors
    handle: Any
    index: int
    uuid: str
    name: str
    mig_parent: int | None = None
    parent_handle: Any = None
    gpu_instance_id: int | None = None
    memory_total: int | None = None
    sm_clock_max_hz: float | None = None
    power_limit_w: float | None = None
    # Where util comes from: "gpm" (GRAPHICS_UTIL), "samples" (the driver's own
    # samples since the last tick), "point" (one point read) or None.
    util_mode: str | None = None
    util_ts: int = 0  # last driver-sample timestamp seen (us)
    mem_ts: int = 0
    last_util: float | None = None
    last_mem_util: float | None = None
    gpm: bool = False
    gpm_bufs: list[Any] = field(default_factory=list)
    gpm_prev: Any = None  # the buffer holding the previous tick's sample
    # With a util span (util_every_s > 0): GRAPHICS_UTIL is asked in its own call,
    # between the sample at the span's start and now, once per span.
    gpm_base: Any = None
    util_request: Any = None
    util_due: float = 0.0
    gpm_names: list[str] = field(default_factory=list)
    gpm_request: Any = None  # the c_nvmlGpmMetricsGet_t reused every tick
    pcie_link_gen: int | None = None
    pcie_link_width: int | None = None
    # The process list: the next read's due time, the newest per-process sample seen (us).
    procs_due: float = -float("inf")
    has_migs: bool = False  # split into MIG instances: they list their own processes
    proc_ts: int = 0
    last_procs: tuple[GpuProcess, ...] | None = None
    # Energy: the driver's counter read every energy_every_s, power integrated between.
    energy: EnergyMeter = field(default_factory=lambda: EnergyMeter(0.0))


class NvmlSource:
    """Reads every GPU (and MIG instance) through NVML; see the module docstring."""

    name = "nvml"

    def __init__(
        self,
        gpm: bool = True,
        gpm_metrics: Sequence[str] | None = None,
        indices: Sequence[int] | None = None,
        nvml: ModuleType | Any | None = None,
        util_every_s: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
        processes_every_s: float = 0.0,
        identities: Callable[[int], Identity | None] | None = None,
        energy_every_s: float = 30.0,
    ) -> None:
        if util_every_s < 0:
            raise ConfigError("util_every_s must be >= 0")
        if processes_every_s < 0:
            raise ConfigError("processes_every_s must be >= 0")
        if energy_every_s < 0:
            raise ConfigError("energy_every_s must be >= 0")
        # The energy counter costs ~3.9 ms of driver CPU a call on an H200 (power: 0.05 ms):
        # read every energy_every_s seconds, power integrated over the ticks between.
        self._energy_every_s = energy_every_s
        self._procs_every_s = processes_every_s
        self._identities: ProcessIdentities | None = None
        if identities is None and processes_every_s > 0:
            self._identities = ProcessIdentities()
            identities = self._identities.identify
        self._identify = identities
        # GRAPHICS_UTIL alone adds ~1.8 ms of driver CPU to a GPM call on an H200
        # (the other ten metrics cost ~15 us). With util_every_s > 0 it is computed
        # once per span of that length, over the whole span, so the duty cycle stays
        # exact over the span while its cost is divided by the ticks in it.
        self._util_every_s = util_every_s
        self._clock = clock
        self._nvml = nvml if nvml is not None else _import_pynvml()
        self._gpm_wanted = _resolve_gpm_metrics(gpm_metrics) if gpm else ()
        self._logged: set[tuple[str, str]] = set()
        self._skip: set[tuple[str, str]] = set()
        self._tick_errors: dict[str, str] = {}
        self._closed = False
        self.notes: tuple[str, ...] = ()
        self._start()
        try:
            self._devices = self._probe(indices)
        except BaseException:
            self._shutdown()
            raise

    # -- start and probe ---------------------------------------------------------

    def _start(self) -> None:
        nv = self._nvml
        try:
            nv.nvmlInit()
        except nv.NVMLError as exc:
            code = getattr(exc, "value", None)
            if code == _LIBRARY_NOT_FOUND:
                msg = "NVML library not found: no NVIDIA driver on this host"
            elif code == _DRIVER_NOT_LOADED:
                msg = "NVIDIA driver not loaded: NVML cannot reach the GPUs"
            elif code == _NO_PERMISSION:
                msg = "NVML: no permission to open the GPU devices"
            else:
                msg = f"NVML could not start: {exc}"
            raise SourceUnavailable(msg) from None

    def _probe(self, indices: Sequence[int] | None) -> list[_Device]:
        nv = self._nvml
        try:
            count = int(nv.nvmlDeviceGetCount())
        except nv.NVMLError as exc:
            raise SourceUnavailable(f"NVML could not count the GPUs: {exc}") from None
        if count == 0:
            raise SourceUnavailable("NVML found no GPU on this host")
        wanted = list(range(count)) if indices is None else list(dict.fromkeys(indices))
        bad = [i for i in wanted if not 0 <= i < count]
        if bad:
            raise ConfigError(
                f"GPU index {bad[0]} does not exist: this host has {count} GPU(s), 0-{count - 1}"
            )
        devices: list[_Device] = []
        notes: list[str] = []
        for i in wanted:
            try:
                handle = nv.nvmlDeviceGetHandleByIndex(i)
            except nv.NVMLError as exc:
                raise SourceUnavailable(f"NVML could not open GPU {i}: {exc}") from None
            dev = self._probe_device(f"GPU {i}", handle, i)
            devices.append(dev)
            if self._gpm_wanted and not dev.gpm:
                notes.append(
                    f"GPU {i} ({dev.name}): no GPM (needs Hopper or newer); "
                    "SM, tensor and DRAM activity unavailable -- use DCGM"
                )
            if dev.util_mode in ("point", None):
                how = "util is a point read (noisy under bursty load)" if dev.util_mode else ""
                notes.append(
                    f"GPU {i} ({dev.name}): driver utilisation samples unsupported; "
                    + (how or "util unavailable")
                )
            migs = self._probe_mig(dev)
            dev.has_migs = bool(migs)
            devices.extend(migs)
        notes.extend(n for dev in devices if (n := _energy_note(dev)))
        self.notes = tuple(notes)
        return devices

    def _probe_device(
        self,
        key: str,
        handle: Any,
        index: int,
        mig_parent: int | None = None,
        parent_handle: Any = None,
    ) -> _Device:
        nv = self._nvml
        dev = _Device(
            key=key,
            handle=handle,
            index=index,
            uuid=_text(self._call(key, "uuid", nv.nvmlDeviceGetUUID, handle)) or "",
            name=_text(self._call(key, "name", nv.nvmlDeviceGetName, handle)) or "",
            mig_parent=mig_parent,
            parent_handle=parent_handle,
            energy=EnergyMeter(self._energy_every_s),
        )
        mem = self._call(key, "memory", nv.nvmlDeviceGetMemoryInfo, handle)
        dev.memory_total = int(mem.total) if mem is not None else None
        clk = self._call(
            key, "sm_clock_max", nv.nvmlDeviceGetMaxClockInfo, handle, nv.NVML_CLOCK_SM
        )
        dev.sm_clock_max_hz = clk * 1e6 if clk is not None else None
        limit = self._call(key, "power_limit", nv.nvmlDeviceGetEnforcedPowerLimit, handle)
        dev.power_limit_w = limit / 1000.0 if limit is not None else None
        if mig_parent is not None:
            dev.gpu_instance_id = self._call(
                key, "gpu_instance_id", nv.nvmlDeviceGetGpuInstanceId, handle
            )
        else:
            # The link's most (an idle link drops to Gen 1): read once, it does not change.
            gen_fn = getattr(nv, "nvmlDeviceGetMaxPcieLinkGeneration", None)
            width_fn = getattr(nv, "nvmlDeviceGetMaxPcieLinkWidth", None)
            if gen_fn is not None and width_fn is not None:
                gen = self._call(key, "pcie_gen", gen_fn, handle)
                width = self._call(key, "pcie_width", width_fn, handle)
                dev.pcie_link_gen = int(gen) if gen is not None else None
                dev.pcie_link_width = int(width) if width is not None else None

        # Probe the per-tick fields once: what fails permanently here is never asked again.
        self._read_hot(dev)
        if self._gpm_wanted:
            gpm_handle = parent_handle if mig_parent is not None else handle
            support = self._call(key, "gpm_support", nv.nvmlGpmQueryDeviceSupport, gpm_handle)
            dev.gpm = bool(support is not None and support.isSupportedDevice)
            if dev.gpm and mig_parent is not None and dev.gpu_instance_id is None:
                dev.gpm = False
            if dev.gpm:
                self._alloc_gpm(dev)
        if dev.gpm and ("GRAPHICS_UTIL" in dev.gpm_names or dev.util_request is not None):
            dev.util_mode = "gpm"
        else:
            self._setup_driver_util(dev)
        return dev

    def _setup_driver_util(self, dev: _Device) -> None:
        """Util without GPM: the driver's samples, else a point read.

        Not beside GPM: nvmlDeviceGetSamples costs ~2.4 ms of CPU per call on an
        H200, more than GRAPHICS_UTIL (~1.8 ms) which also covers exactly the tick.
        """
        nv = self._nvml
        # Read once now so the first tick's mean starts from here, and so a
        # device without samples is known before the first tick.
        got = self._samples(dev, "util_samples", nv.NVML_GPU_UTILIZATION_SAMPLES, 0)
        if got is not None:
            dev.util_mode = "samples"
            dev.util_ts, dev.last_util = got
            got = self._samples(dev, "mem_util_samples", nv.NVML_MEMORY_UTILIZATION_SAMPLES, 0)
            if got is not None:
                dev.mem_ts, dev.last_mem_util = got
            return
        rates = self._call(dev.key, "util_point", nv.nvmlDeviceGetUtilizationRates, dev.handle)
        dev.util_mode = "point" if rates is not None else None

    def _probe_mig(self, parent: _Device) -> list[_Device]:
        nv = self._nvml
        mode = self._call(parent.key, "mig_mode", nv.nvmlDeviceGetMigMode, parent.handle)
        if mode is None or int(mode[0]) != nv.NVML_DEVICE_MIG_ENABLE:
            return []
        slots = self._call(
            parent.key, "mig_count", nv.nvmlDeviceGetMaxMigDeviceCount, parent.handle
        )
        out: list[_Device] = []
        for slot in range(int(slots or 0)):
            try:
                mig = nv.nvmlDeviceGetMigDeviceHandleByIndex(parent.handle, slot)
            except nv.NVMLError:
                continue  # MIG slots are sparse: an empty slot answers NOT_FOUND
            out.append(
                self._probe_device(
                    f"{parent.key} MIG {slot}",
                    mig,
                    slot,
                    mig_parent=parent.index,
                    parent_handle=parent.handle,
                )
            )
        return out

    def _alloc_gpm(self, dev: _Device) -> None:
        nv = self._nvml
        try:
            # Two buffers swap each tick; a third holds the start of a util span.
            for _ in range(3 if self._util_every_s > 0 else 2):
                dev.gpm_bufs.append(nv.nvmlGpmSampleAlloc())
        except nv.NVMLError as exc:
            self._log_once(dev.key, "gpm_alloc", f"GPM sample allocation failed: {exc}")
            for buf in dev.gpm_bufs:
                self._call(dev.key, "gpm_free", nv.nvmlGpmSampleFree, buf)
            dev.gpm, dev.gpm_bufs = False, []
            return
        dev.gpm_names = list(self._gpm_wanted)
        if self._util_every_s > 0 and "GRAPHICS_UTIL" in dev.gpm_names:
            dev.gpm_names.remove("GRAPHICS_UTIL")
            req = nv.c_nvmlGpmMetricsGet_t()
            req.version = nv.NVML_GPM_METRICS_GET_VERSION
            req.numMetrics = 1
            req.metrics[0].metricId = nv.NVML_GPM_METRIC_GRAPHICS_UTIL
            dev.util_request = req
        self._build_gpm_request(dev)

    def _build_gpm_request(self, dev: _Device) -> None:
        nv = self._nvml
        req = nv.c_nvmlGpmMetricsGet_t()
        req.version = nv.NVML_GPM_METRICS_GET_VERSION
        req.numMetrics = len(dev.gpm_names)
        for i, metric in enumerate(dev.gpm_names):
            req.metrics[i].metricId = getattr(nv, f"NVML_GPM_METRIC_{metric}")
        dev.gpm_request = req

    # -- the one door to NVML ------------------------------------------------------

    def _call(self, key: str, fld: str, fn: Callable[..., Any], *args: Any) -> Any:
        """Call NVML; turn an error into None, logged once per (device, field).

        A permanent failure (not supported, no permission, a function the driver
        lacks) marks the field as skipped, so it costs nothing on later ticks.
        """
        if (key, fld) in self._skip:
            return None
        try:
            return fn(*args)
        except self._nvml.NVMLError as exc:
            self._failed(key, fld, exc)
            return None

    def _failed(self, key: str, fld: str, exc: Exception) -> None:
        code = getattr(exc, "value", None)
        if code in _PERMANENT:
            self._skip.add((key, fld))
            self._log_once(key, fld, f"{fld} unavailable ({exc}); not asked again")
            return
        self._log_once(key, fld, f"{fld} failed: {exc}", logging.WARNING)
        if code == _GPU_IS_LOST:
            self._tick_errors.setdefault(key, "GPU is lost: reset or reboot needed")
        else:
            self._tick_errors.setdefault(key, f"{fld}: {exc}")

    def _log_once(self, key: str, fld: str, msg: str, level: int = logging.INFO) -> None:
        if (key, fld) in self._logged:
            return
        self._logged.add((key, fld))
        log.log(level, "nvml %s: %s", key, msg)

    def _samples(self, dev: _Device, fld: str, kind: int, since: int) -> tuple[int, float] | None:
        """Mean of the driver's samples newer than ``since`` (us): (newest timestamp, ratio).

        NOT_FOUND means "no new sample since": the driver's period can be longer
        than a short tick. Then the last mean stands (it covers part of this tick).
        """
        if (dev.key, fld) in self._skip:
            return None
        nv = self._nvml
        try:
            vtype, samples = nv.nvmlDeviceGetSamples(dev.handle, kind, since)
        except nv.NVMLError as exc:
            if getattr(exc, "value", None) != _NOT_FOUND:
                self._failed(dev.key, fld, exc)
            return None
        attr = _SAMPLE_VALUE_ATTR.get(int(vtype), "uiVal")
        newest = since
        total = 0.0
        n = 0
        for s in samples:
            ts = int(s.timeStamp)
            if ts <= since:
                continue
            total += float(getattr(s.sampleValue, attr))
            n += 1
            newest = max(newest, ts)
        if n == 0:
            return None
        return newest, total / n / 100.0

    # -- each tick ----------------------------------------------------------------

    def read(self) -> Reading:
        self._tick_errors = {}
        gpus: list[GpuSample] = []
        for dev in self._devices:
            try:
                gpus.append(self._read_device(dev))
            except Exception as exc:  # a bug in one device's read must not hide the others
                log.exception("nvml %s: read failed", dev.key)
                self._tick_errors.setdefault(dev.key, f"{type(exc).__name__}: {exc}")
        errors = tuple(SourceError(self.name, k, m) for k, m in self._tick_errors.items())
        return Reading(gpus=tuple(gpus), errors=errors)

    def _read_hot(self, dev: _Device) -> dict[str, Any]:
        """The point fields read every tick, each one call."""
        nv = self._nvml
        key, h = dev.key, dev.handle
        out: dict[str, Any] = {}
        mem = self._call(key, "memory", nv.nvmlDeviceGetMemoryInfo, h)
        out["memory_used_bytes"] = int(mem.used) if mem is not None else None
        if mem is not None and dev.memory_total is None:
            dev.memory_total = int(mem.total)
        mw = self._call(key, "power", nv.nvmlDeviceGetPowerUsage, h)
        out["power_watts"] = mw / 1000.0 if mw is not None else None
        out["energy_joules"] = self._read_energy(dev, out["power_watts"])
        out["energy_source"] = dev.energy.source
        mhz = self._call(key, "sm_clock", nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM)
        out["sm_clock_hz"] = mhz * 1e6 if mhz is not None else None
        reasons_fn = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            nv, "nvmlDeviceGetCurrentClocksThrottleReasons", None
        )
        mask = self._call(key, "throttle", reasons_fn, h) if reasons_fn is not None else None
        out["throttle_reasons"] = throttle_names(int(mask)) if mask is not None else None
        temp = self._call(
            key, "temperature", nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU
        )
        out["temperature_c"] = float(temp) if temp is not None else None
        return out

    def _read_energy(self, dev: _Device, power_w: float | None) -> float | None:
        """The device's energy figure this tick (monitor.sources.energy); the counter asked
        only when due. The first call (the probe) is the first reading: 0 J."""
        meter = dev.energy
        now = self._clock()
        raw = None
        if meter.due(now):
            fn = getattr(self._nvml, "nvmlDeviceGetTotalEnergyConsumption", None)
            raw = self._call(dev.key, "energy", fn, dev.handle) if fn is not None else None
            if fn is None or (dev.key, "energy") in self._skip:
                meter.counter = False  # not supported here: power integrated from now on
        return meter.update(now, power_w, float(raw) if raw is not None else None)

    def _read_device(self, dev: _Device) -> GpuSample:
        nv = self._nvml
        values = self._read_hot(dev)
        if dev.gpm:
            values.update(self._read_gpm(dev))
        # With GPM, mem_util (NVML's memory duty cycle) is not read: dram_active
        # measures the memory interface itself, and its samples cost ~2.4 ms a call.
        util: float | None = values.pop("util", None)
        mem_util: float | None = None
        if dev.util_mode == "samples":
            got = self._samples(dev, "util_samples", nv.NVML_GPU_UTILIZATION_SAMPLES, dev.util_ts)
            if got is not None:
                dev.util_ts, dev.last_util = got
            util = dev.last_util
            got = self._samples(
                dev, "mem_util_samples", nv.NVML_MEMORY_UTILIZATION_SAMPLES, dev.mem_ts
            )
            if got is not None:
                dev.mem_ts, dev.last_mem_util = got
            mem_util = dev.last_mem_util
        elif dev.util_mode == "point":
            rates = self._call(dev.key, "util_point", nv.nvmlDeviceGetUtilizationRates, dev.handle)
            util = rates.gpu / 100.0 if rates is not None else None
            mem_util = rates.memory / 100.0 if rates is not None else None
        driver_util = util if dev.util_mode in ("samples", "point") else None
        if dev.util_mode == "gpm":
            # What nvidia-smi shows, beside GPM's kernels-only duty cycle: one point read
            # (microseconds), so a user can see why the two differ (copies count in it).
            rates = self._call(dev.key, "util_point", nv.nvmlDeviceGetUtilizationRates, dev.handle)
            driver_util = rates.gpu / 100.0 if rates is not None else None
        # Without GPM, PCIe throughput stays None: nvmlDeviceGetPcieThroughput
        # sleeps ~20 ms in the driver per call (two per GPU, so 160 ms of every
        # tick on 8 GPUs) and measures only that 20 ms window -- as much a lottery
        # as a point util read. DCGM's PCIe fields (1009/1010) cover that case.
        return GpuSample(
            index=dev.index,
            uuid=dev.uuid,
            name=dev.name,
            source="nvml",
            util=util,
            mem_util=mem_util,
            power_limit_watts=dev.power_limit_w,
            sm_clock_max_hz=dev.sm_clock_max_hz,
            memory_total_bytes=dev.memory_total,
            mig_parent=dev.mig_parent,
            pcie_link_gen=dev.pcie_link_gen,
            pcie_link_width=dev.pcie_link_width,
            driver_util=driver_util,
            mig_instance=dev.gpu_instance_id if dev.mig_parent is not None else None,
            processes=(
                self._read_processes(dev, util, mem_util)
                if self._procs_every_s > 0 and not dev.has_migs
                else None
            ),
            **values,
        )

    def _read_processes(
        self, dev: _Device, util: float | None, mem_util: float | None
    ) -> tuple[GpuProcess, ...] | None:
        """The processes on one device, read once per ``processes_every_s``; see the docstring.

        ``util``, ``mem_util``: the device's duty cycles this tick, a lone process's shares."""
        now = self._clock()
        if now < dev.procs_due:
            return dev.last_procs
        dev.procs_due = now + self._procs_every_s
        nv = self._nvml
        memory: dict[int, int | None] = {}
        listed = False
        for fld, fn_name in (
            ("compute_processes", "nvmlDeviceGetComputeRunningProcesses"),
            ("graphics_processes", "nvmlDeviceGetGraphicsRunningProcesses"),
        ):
            fn = getattr(nv, fn_name, None)
            got = self._call(dev.key, fld, fn, dev.handle) if fn is not None else None
            if got is None:
                continue
            listed = True
            for p in got:
                used = getattr(p, "usedGpuMemory", None)
                used = int(used) if used is not None else None
                prev = memory.get(int(p.pid))
                # A process with both a compute and a graphics context: its memory once.
                memory[int(p.pid)] = used if prev is None else max(prev, used or 0)
        if not listed:
            dev.last_procs = None
            return None
        if len(memory) == 1 and dev.mig_parent is None:
            shares: Mapping[int, tuple[float | None, float | None]] | None = {
                pid: (util, mem_util) for pid in memory
            }
        else:
            shares = self._process_shares(dev)
        out = []
        for pid in sorted(memory):
            sm, mem = shares.get(pid, (0.0, 0.0)) if shares is not None else (None, None)
            ident = self._identify(pid) if self._identify is not None else None
            out.append(
                GpuProcess(
                    pid=pid,
                    memory_bytes=memory[pid],
                    sm_share=sm,
                    mem_share=mem,
                    visible=ident is not None,
                    user=ident.user if ident else None,
                    command=ident.command if ident else None,
                    container=ident.container if ident else None,
                    runtime=ident.runtime if ident else None,
                    pod_uid=ident.pod_uid if ident else None,
                    pod=ident.pod if ident else None,
                    namespace=ident.namespace if ident else None,
                )
            )
        dev.last_procs = tuple(out)
        if self._identities is not None and dev is self._devices[-1]:
            listed_pids = {p.pid for d in self._devices for p in (d.last_procs or ())}
            self._identities.keep_only(listed_pids)
        return dev.last_procs

    def _process_shares(self, dev: _Device) -> dict[int, tuple[float, float]] | None:
        """PID -> (SM share, memory share), the mean of the driver's samples since the last
        read. None: not supported here. A PID without a sample ran no kernel since."""
        fld = "process_utilization"
        fn = getattr(self._nvml, "nvmlDeviceGetProcessUtilization", None)
        if fn is None or (dev.key, fld) in self._skip:
            return None
        try:
            samples = fn(dev.handle, dev.proc_ts)
        except self._nvml.NVMLError as exc:
            if getattr(exc, "value", None) == _NOT_FOUND:
                return {}
            self._failed(dev.key, fld, exc)
            return None
        acc: dict[int, list[float]] = {}
        newest = dev.proc_ts
        for s in samples:
            ts = int(s.timeStamp)
            if ts <= dev.proc_ts:
                continue
            newest = max(newest, ts)
            a = acc.setdefault(int(s.pid), [0.0, 0.0, 0.0])
            a[0] += float(s.smUtil)
            a[1] += float(s.memUtil)
            a[2] += 1
        dev.proc_ts = newest
        return {pid: (a[0] / a[2] / 100.0, a[1] / a[2] / 100.0) for pid, a in acc.items()}

    def _read_gpm(self, dev: _Device) -> dict[str, float | None]:
        """One GPM sample into the spare buffer, then every metric in one call; swap buffers."""
        nv = self._nvml
        prev = dev.gpm_prev
        cur = next(b for b in dev.gpm_bufs if b is not prev and b is not dev.gpm_base)
        if dev.mig_parent is None:
            ok = self._call(dev.key, "gpm_sample", nv.nvmlGpmSampleGet, dev.handle, cur)
        else:
            ok = self._call(
                dev.key,
                "gpm_sample",
                nv.nvmlGpmMigSampleGet,
                dev.parent_handle,
                dev.gpu_instance_id,
                cur,
            )
        if ok is None:
            dev.gpm_prev = dev.gpm_base = None
            if (dev.key, "gpm_sample") in self._skip:
                self._gpm_off(dev)
            return {}
        out: dict[str, float | None] = {}
        if prev is not None and dev.gpm_names:
            req = dev.gpm_request
            req.sample1 = prev
            req.sample2 = cur
            got = self._call(dev.key, "gpm_metrics", nv.nvmlGpmMetricsGet, req)
            if got is not None:
                dropped = False
                # pynvml's structures answer each attribute through Python: fetch once.
                metrics = req.metrics
                for i, metric in enumerate(dev.gpm_names):
                    m = metrics[i]
                    attr, scale = GPM_FIELDS[metric]
                    ret = int(m.nvmlReturn)
                    if ret == 0:
                        out[attr] = float(m.value) * scale
                    elif ret in _PERMANENT:
                        self._log_once(
                            dev.key, f"gpm:{metric}", f"GPM {metric} unsupported ({ret})"
                        )
                        self._skip.add((dev.key, f"gpm:{metric}"))
                        dropped = True
                    else:
                        self._log_once(
                            dev.key,
                            f"gpm:{metric}",
                            f"GPM {metric} failed ({ret})",
                            logging.WARNING,
                        )
                if dropped:
                    dev.gpm_names = [
                        n for n in dev.gpm_names if (dev.key, f"gpm:{n}") not in self._skip
                    ]
                    self._build_gpm_request(dev)
                    if (
                        dev.util_mode == "gpm"
                        and "GRAPHICS_UTIL" not in dev.gpm_names
                        and dev.util_request is None
                    ):
                        self._setup_driver_util(dev)
        if dev.util_request is not None:
            self._read_util_span(dev, cur, out)
        dev.gpm_prev = cur
        return out

    def _read_util_span(self, dev: _Device, cur: Any, out: dict[str, float | None]) -> None:
        """GRAPHICS_UTIL between the span's first sample and now, once per span."""
        now = self._clock()
        if dev.gpm_base is None:
            dev.gpm_base, dev.util_due = cur, now  # the first span ends at the next tick
        elif now >= dev.util_due:
            req = dev.util_request
            req.sample1 = dev.gpm_base
            req.sample2 = cur
            got = self._call(dev.key, "gpm_util", self._nvml.nvmlGpmMetricsGet, req)
            if got is not None and int(req.metrics[0].nvmlReturn) == 0:
                dev.last_util = float(req.metrics[0].value) * GPM_FIELDS["GRAPHICS_UTIL"][1]
            dev.gpm_base, dev.util_due = cur, now + self._util_every_s
        out["util"] = dev.last_util

    def _gpm_off(self, dev: _Device) -> None:
        """GPM refused for good on this device: free its buffers, util from the driver."""
        for buf in dev.gpm_bufs:
            self._call(dev.key, "gpm_free", self._nvml.nvmlGpmSampleFree, buf)
        dev.gpm_bufs, dev.gpm, dev.gpm_names = [], False, []
        dev.gpm_prev = dev.gpm_base = dev.util_request = None
        if dev.util_mode == "gpm":
            self._setup_driver_util(dev)

    # -- stop -------------------------------------------------------------------------

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for dev in getattr(self, "_devices", ()):
            for buf in dev.gpm_bufs:
                self._call(dev.key, "gpm_free", self._nvml.nvmlGpmSampleFree, buf)
            dev.gpm_bufs, dev.gpm = [], False
        self._shutdown()

    def _shutdown(self) -> None:
        try:
            self._nvml.nvmlShutdown()
        except self._nvml.NVMLError as exc:
            log.debug("nvmlShutdown: %s", exc)


def _import_pynvml() -> ModuleType:
    try:
        import pynvml
    except ImportError:
        raise SourceUnavailable(
            "NVML bindings missing: install nvidia-ml-py (pip install nvidia-ml-py)"
        ) from None
    return pynvml


def _energy_note(dev: _Device) -> str | None:
    """What a user is told where a device's energy is not the driver's counter."""
    what = f"{dev.key} ({dev.name})"
    if dev.energy.source == "power" and not dev.energy.counter:
        return (
            f"{what}: no energy counter; energy is its power readings integrated over "
            "the ticks (marked 'power')"
        )
    if dev.energy.source is None:
        if dev.mig_parent is not None:
            return (
                f"{what}: NVML gives no energy or power for a MIG instance; energy is "
                f"GPU {dev.mig_parent}'s as a whole"
            )
        return f"{what}: no energy or power reading; energy per token unavailable"
    return None


def _resolve_gpm_metrics(names: Sequence[str] | None) -> tuple[str, ...]:
    if names is None:
        return DEFAULT_GPM_METRICS
    out: list[str] = []
    for raw in names:
        name = raw.strip().upper().removeprefix("NVML_GPM_METRIC_")
        if name not in GPM_FIELDS:
            raise ConfigError(
                f"unknown GPM metric {raw!r}: choose from {', '.join(DEFAULT_GPM_METRICS)}"
            )
        if name not in out:
            out.append(name)
    # util comes from GRAPHICS_UTIL wherever GPM works: always ask for it.
    if "GRAPHICS_UTIL" not in out:
        out.insert(0, "GRAPHICS_UTIL")
    return tuple(out)


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return str(value)
