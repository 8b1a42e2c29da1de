"""GPU readings from a DCGM host engine (``nv-hostengine``) through NVIDIA's pydcgm bindings.

DCGM's profiling fields give SM activity, tensor and DRAM activity on GPUs
older than Hopper (where NVML has no GPM), e.g. an A100 or a T4.

What a user sees when something is missing:

- pydcgm not importable (DCGM is not on PyPI: its bindings ship with the
  datacenter-gpu-manager package, in ``/usr/share/datacenter-gpu-manager-4/bindings/python3``
  or ``/usr/local/dcgm/bindings/python3``): constructing the source raises
  ``SourceUnavailable`` with one line saying so and where to point PYTHONPATH.
- No host engine answering at the address (default ``localhost:5555``): one
  line, ``DCGM: no host engine answers at localhost:5555 (start nv-hostengine)``.
- The engine answers but cannot watch profiling fields (consumer GPU, another
  profiler holding the counters, no permission): the device fields (util,
  power, clocks, memory, temperature) still come, the profiling ones are
  ``None``, and ``notes`` says why in one line.
- A field DCGM leaves blank for a GPU: ``None``, never 0.

Field IDs are used as numbers (checked against DCGM's ``dcgm_fields.py``):
DCGM 4.6 renamed the profiling fields to ``*_UTIL_RATIO`` but kept their IDs.
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Sequence
from typing import Any

from monitor.core.errors import SourceUnavailable
from monitor.sources.base import Reading

# DCGM_CLOCKS_EVENT_REASON_* are NVML's bits: one table names both.
from monitor.sources.nvml import throttle_names
from monitor.sources.samples import GpuSample, SourceError

log = logging.getLogger(__name__)

# Device fields (dcgm_fields.DCGM_FI_DEV_*).
SM_CLOCK = 100  # MHz
CLOCKS_EVENT_REASONS = 112  # bitmask, same bits as NVML
MAX_SM_CLOCK = 113  # MHz
GPU_TEMP = 150  # C
POWER_USAGE = 155  # W
TOTAL_ENERGY = 156  # mJ since the driver loaded (DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION)
ENFORCED_POWER_LIMIT = 164  # W
GPU_UTIL = 203  # percent
MEM_COPY_UTIL = 204  # percent
FB_TOTAL = 250  # MiB
FB_USED = 252  # MiB
DEVICE_FIELDS: tuple[int, ...] = (
    SM_CLOCK,
    CLOCKS_EVENT_REASONS,
    MAX_SM_CLOCK,
    GPU_TEMP,
    POWER_USAGE,
    TOTAL_ENERGY,
    ENFORCED_POWER_LIMIT,
    GPU_UTIL,
    MEM_COPY_UTIL,
    FB_TOTAL,
    FB_USED,
)

# Profiling fields (dcgm_fields.DCGM_FI_PROF_*): ratios 0-1, and bytes per second.
SM_ACTIVE = 1002
SM_OCCUPANCY = 1003
PIPE_TENSOR_ACTIVE = 1004
DRAM_ACTIVE = 1005
PIPE_FP32_ACTIVE = 1007
PIPE_FP16_ACTIVE = 1008
PCIE_TX_BYTES = 1009
PCIE_RX_BYTES = 1010
NVLINK_TX_BYTES = 1011
NVLINK_RX_BYTES = 1012
PROFILING_FIELDS: tuple[int, ...] = (
    SM_ACTIVE,
    SM_OCCUPANCY,
    PIPE_TENSOR_ACTIVE,
    DRAM_ACTIVE,
    PIPE_FP32_ACTIVE,
    PIPE_FP16_ACTIVE,
    PCIE_TX_BYTES,
    PCIE_RX_BYTES,
    NVLINK_TX_BYTES,
    NVLINK_RX_BYTES,
)

# field -> (GpuSample attribute, scale to base units)
_MIB = 1024 * 1024
_MAP: dict[int, tuple[str, float]] = {
    SM_CLOCK: ("sm_clock_hz", 1e6),
    MAX_SM_CLOCK: ("sm_clock_max_hz", 1e6),
    GPU_TEMP: ("temperature_c", 1.0),
    POWER_USAGE: ("power_watts", 1.0),
    TOTAL_ENERGY: ("energy_joules", 1e-3),
    ENFORCED_POWER_LIMIT: ("power_limit_watts", 1.0),
    GPU_UTIL: ("util", 0.01),
    MEM_COPY_UTIL: ("mem_util", 0.01),
    SM_ACTIVE: ("sm_active", 1.0),
    SM_OCCUPANCY: ("sm_occupancy", 1.0),
    PIPE_TENSOR_ACTIVE: ("tensor_active", 1.0),
    DRAM_ACTIVE: ("dram_active", 1.0),
    PIPE_FP32_ACTIVE: ("fp32_active", 1.0),
    PIPE_FP16_ACTIVE: ("fp16_active", 1.0),
    PCIE_TX_BYTES: ("pcie_tx_bytes_per_s", 1.0),
    PCIE_RX_BYTES: ("pcie_rx_bytes_per_s", 1.0),
    NVLINK_TX_BYTES: ("nvlink_tx_bytes_per_s", 1.0),
    NVLINK_RX_BYTES: ("nvlink_rx_bytes_per_s", 1.0),
}

_BINDINGS_HINT = (
    "DCGM python bindings (pydcgm) not found: install datacenter-gpu-manager and add its "
    "bindings/python3 folder to PYTHONPATH"
)


class DcgmSource:
    """Watches DCGM fields on every GPU the host engine sees; see the module docstring."""

    name = "dcgm"

    def __init__(
        self,
        host: str = "localhost:5555",
        interval: float = 1.0,
        indices: Sequence[int] | None = None,
    ) -> None:
        self.host = host
        self.notes: tuple[str, ...] = ()
        self._logged: set[tuple[int, str]] = set()
        self._closed = False
        try:
            self._pydcgm = importlib.import_module("pydcgm")
            self._structs = importlib.import_module("dcgm_structs")
            importlib.import_module("dcgm_fields")
        except ImportError:
            raise SourceUnavailable(_BINDINGS_HINT) from None
        self._error = self._structs.DCGMError
        try:
            self._handle = self._pydcgm.DcgmHandle(
                ipAddress=host, opMode=self._structs.DCGM_OPERATION_MODE_AUTO
            )
        except self._error as exc:
            raise SourceUnavailable(
                f"DCGM: no host engine answers at {host} (start nv-hostengine): {_line(exc)}"
            ) from None
        try:
            self._setup(interval, indices)
        except self._error as exc:
            self.close()
            raise SourceUnavailable(f"DCGM at {host}: {_line(exc)}") from None
        except BaseException:
            self.close()
            raise

    def _setup(self, interval: float, indices: Sequence[int] | None) -> None:
        system = self._handle.GetSystem()
        gpu_ids = list(system.discovery.GetAllSupportedGpuIds())
        if indices is not None:
            missing = [i for i in indices if i not in gpu_ids]
            if missing:
                raise SourceUnavailable(f"DCGM at {self.host} has no GPU {missing[0]}")
            gpu_ids = [i for i in gpu_ids if i in indices]
        if not gpu_ids:
            raise SourceUnavailable(f"DCGM at {self.host} sees no supported GPU")
        self._gpu_ids = gpu_ids
        self._info: dict[int, tuple[str, str]] = {}
        for gid in gpu_ids:
            ident = system.discovery.GetGpuAttributes(gid).identifiers
            self._info[gid] = (_text(ident.uuid), _text(ident.deviceName))
        # A named group of our own, so two headroom processes do not share watches.
        tag = f"headroom-{os.getpid()}-{id(self):x}"
        self._group = system.GetGroupWithGpuIds(tag, gpu_ids)
        update_us = max(100_000, int(interval * 1e6))
        # Keep a little history only: we read the latest value each tick.
        keep_age_s = max(10.0, interval * 5)
        self._dev_fields = self._pydcgm.DcgmFieldGroup(
            self._handle, name=f"{tag}-dev", fieldIds=list(DEVICE_FIELDS)
        )
        self._group.samples.WatchFields(self._dev_fields, update_us, keep_age_s, 0)
        # Profiling fields are watched apart: where they are refused (no DCP on
        # this GPU, counters held by a profiler), the device fields still come.
        self._prof_fields: Any = None
        try:
            prof = self._pydcgm.DcgmFieldGroup(
                self._handle, name=f"{tag}-prof", fieldIds=list(PROFILING_FIELDS)
            )
            self._group.samples.WatchFields(prof, update_us, keep_age_s, 0)
            self._prof_fields = prof
        except self._error as exc:
            self.notes = (
                f"DCGM at {self.host}: profiling fields unavailable ({_line(exc)}); "
                "SM, tensor and DRAM activity unavailable",
            )
            log.info("dcgm: %s", self.notes[0])

    def read(self) -> Reading:
        values: dict[int, dict[int, Any]] = {}
        errors: list[SourceError] = []
        groups = [self._dev_fields] + ([self._prof_fields] if self._prof_fields else [])
        for fg in groups:
            try:
                latest = self._group.samples.GetLatest(fg).values
            except self._error as exc:
                errors.append(SourceError(self.name, self.host, _line(exc)))
                continue
            for gid, fields in latest.items():
                values.setdefault(int(gid), {}).update(fields)
        gpus = tuple(self._sample(gid, values.get(gid, {})) for gid in self._gpu_ids)
        if errors and not values:
            gpus = ()
        return Reading(gpus=gpus, errors=tuple(errors[:1]))

    def _sample(self, gid: int, fields: dict[int, Any]) -> GpuSample:
        uuid, name = self._info[gid]
        out: dict[str, Any] = {}
        for fid, series in fields.items():
            v = self._latest(gid, int(fid), series)
            if v is None:
                continue
            fid = int(fid)
            if fid in _MAP:
                attr, scale = _MAP[fid]
                out[attr] = float(v) * scale
            elif fid == FB_TOTAL:
                out["memory_total_bytes"] = int(v) * _MIB
            elif fid == FB_USED:
                out["memory_used_bytes"] = int(v) * _MIB
            elif fid == CLOCKS_EVENT_REASONS:
                out["throttle_reasons"] = throttle_names(int(v))
        if "energy_joules" in out:
            out["energy_source"] = "counter"
        return GpuSample(index=gid, uuid=uuid, name=name, source="dcgm", **out)

    def _latest(self, gid: int, fid: int, series: Any) -> Any:
        """The newest value of one field, or None when DCGM left it blank."""
        try:
            value = series[-1]
        except (IndexError, TypeError):
            return None
        if getattr(value, "isBlank", False):
            if (gid, f"blank:{fid}") not in self._logged:
                self._logged.add((gid, f"blank:{fid}"))
                log.info(
                    "dcgm GPU %d: field %d is blank (unsupported or not yet sampled)", gid, fid
                )
            return None
        return value.value

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        handle = getattr(self, "_handle", None)
        if handle is None:
            return
        for fg in (getattr(self, "_prof_fields", None), getattr(self, "_dev_fields", None)):
            if fg is None:
                continue
            try:
                self._group.samples.UnwatchFields(fg)
                fg.Delete()
            except Exception as exc:  # closing must not raise; the engine may be gone
                log.debug("dcgm: unwatch failed: %s", exc)
        group = getattr(self, "_group", None)
        if group is not None:
            try:
                group.Delete()
            except Exception as exc:
                log.debug("dcgm: group delete failed: %s", exc)
        try:
            handle.Shutdown()
        except Exception as exc:
            log.debug("dcgm: disconnect failed: %s", exc)


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return str(value)


def _line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]
