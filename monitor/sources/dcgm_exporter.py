"""GPU source over HTTP: scrape a dcgm-exporter endpoint into GpuSamples.

dcgm-exporter already averages DCGM's samples over its own collect interval,
so each scrape is one reading per GPU (or MIG instance). A field the exporter
does not publish (its counters CSV decides) stays None, never 0.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from monitor.core.errors import ConfigError, EndpointError
from monitor.sources import promtext
from monitor.sources.base import Reading
from monitor.sources.samples import GpuSample, SourceError

log = logging.getLogger(__name__)

MIB = 1024 * 1024


def _percent(v: float) -> float:
    return v / 100.0


def _ratio_or_percent(v: float) -> float:
    # DCGM 4.x renamed field 203 DCGM_FI_DEV_GPU_UTIL to ..._UTIL_RATIO without a
    # new field id; a value above 1 can only be the old percent scale.
    return v / 100.0 if v > 1.0 else v


def _same(v: float) -> float:
    return v


def _mhz(v: float) -> float:
    return v * 1e6


@dataclass(frozen=True, slots=True)
class Field:
    attr: str  # GpuSample attribute, or a private name combined below
    names: tuple[str, ...]  # exporter metric names, preferred first
    convert: Callable[[float], float] = _same


# DCGM 4.x renamed fields per its "Field Naming Standard" (same numeric ids,
# old names kept as deprecated aliases): accept both spellings.
FIELDS: tuple[Field, ...] = (
    Field("util", ("DCGM_FI_DEV_GPU_UTIL",), _percent),
    Field("util", ("DCGM_FI_DEV_GPU_UTIL_RATIO",), _ratio_or_percent),
    Field("mem_util", ("DCGM_FI_DEV_MEM_COPY_UTIL",), _percent),
    Field("sm_active", ("DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_SM_UTIL_RATIO")),
    Field("sm_occupancy", ("DCGM_FI_PROF_SM_OCCUPANCY", "DCGM_FI_PROF_SM_OCCUPANCY_RATIO")),
    Field("tensor_active", ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_TENSOR_UTIL_RATIO")),
    Field("dram_active", ("DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_PROF_DRAM_UTIL_RATIO")),
    Field("fp16_active", ("DCGM_FI_PROF_PIPE_FP16_ACTIVE", "DCGM_FI_PROF_FP16_UTIL_RATIO")),
    Field("fp32_active", ("DCGM_FI_PROF_PIPE_FP32_ACTIVE", "DCGM_FI_PROF_FP32_UTIL_RATIO")),
    # The profiling PCIe/NVLink fields are rates already (bytes per second).
    Field("pcie_tx_bytes_per_s", ("DCGM_FI_PROF_PCIE_TX_BYTES",)),
    Field("pcie_rx_bytes_per_s", ("DCGM_FI_PROF_PCIE_RX_BYTES",)),
    Field("nvlink_tx_bytes_per_s", ("DCGM_FI_PROF_NVLINK_TX_BYTES",)),
    Field("nvlink_rx_bytes_per_s", ("DCGM_FI_PROF_NVLINK_RX_BYTES",)),
    Field("power_watts", ("DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_BOARD_POWER_WATTS")),
    # mJ since the driver loaded (dcgm-exporter's default counters list it, typed counter:
    # a text parser names a counter's samples <name>_total).
    Field(
        "energy_joules",
        ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION_total", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"),
        lambda v: v / 1000.0,
    ),
    Field(
        "power_limit_watts",
        (
            "DCGM_FI_DEV_ENFORCED_POWER_LIMIT",
            "DCGM_FI_DEV_BOARD_POWER_LIMIT_ENFORCED_WATTS",
            "DCGM_FI_DEV_POWER_MGMT_LIMIT",
            "DCGM_FI_DEV_BOARD_POWER_LIMIT_REQUESTED_WATTS",
        ),
    ),
    Field("sm_clock_hz", ("DCGM_FI_DEV_SM_CLOCK",), _mhz),
    Field("sm_clock_max_hz", ("DCGM_FI_DEV_MAX_SM_CLOCK",), _mhz),
    Field("temperature_c", ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_GPU_TEMP_CELSIUS")),
    # Framebuffer figures are MiB; combined into bytes below.
    Field("_fb_used", ("DCGM_FI_DEV_FB_USED",)),
    Field("_fb_free", ("DCGM_FI_DEV_FB_FREE",)),
    Field("_fb_reserved", ("DCGM_FI_DEV_FB_RESERVED",)),
    Field("_fb_total", ("DCGM_FI_DEV_FB_TOTAL",)),
)

_NAMES = promtext.expand_names(n for f in FIELDS for n in f.names)

# Labels that become GpuSample fields rather than extra labels.
_MAPPED_LABELS = frozenset(("gpu", "UUID", "uuid", "modelName", "GPU_I_ID"))

EntityKey = tuple[int, str | None]  # (gpu index, MIG GPU instance id)


def _entity(labels: dict[str, str]) -> EntityKey | None:
    try:
        index = int(labels.get("gpu", ""))
    except ValueError:
        return None
    gi = labels.get("GPU_I_ID") or None
    return (index, gi)


def gpus_from_text(text: str, url: str) -> tuple[tuple[GpuSample, ...], int]:
    """Parse one dcgm-exporter exposition into GpuSamples and the number of skipped lines.

    Raises EndpointError when the page is not dcgm-exporter's or carries no
    field headroom reads.
    """
    exposition = promtext.parse(text, _NAMES)
    shown = promtext.display_url(url)
    if not exposition.samples:
        if "DCGM_FI_" in text:
            wanted = "DCGM_FI_DEV_GPU_UTIL, DCGM_FI_PROF_SM_ACTIVE, DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"
            raise EndpointError(
                f"{shown} serves none of the DCGM fields headroom reads "
                f"(add {wanted}, ... to dcgm-exporter's counters CSV)"
            )
        raise EndpointError(
            f"{shown} does not serve dcgm-exporter metrics (no DCGM_FI_ families found)"
        )
    by_name = exposition.by_name()
    entities: dict[EntityKey, dict[str, str]] = {}
    values: dict[EntityKey, dict[str, float]] = {}
    for f in FIELDS:
        for name in f.names:
            for s in by_name.get(name, ()):
                key = _entity(s.labels)
                if key is None:
                    continue
                _merge_labels(entities.setdefault(key, {}), s.labels)
                per = values.setdefault(key, {})
                if f.attr in per or not math.isfinite(s.value):
                    continue  # first name (and first series) wins
                per[f.attr] = f.convert(s.value)
    gpus = tuple(
        _sample(key, entities[key], values.get(key, {})) for key in sorted(entities, key=_order)
    )
    return gpus, exposition.skipped_lines


def _order(key: EntityKey) -> tuple[int, int, str]:
    index, gi = key
    if gi is None:
        return (index, -1, "")
    return (index, int(gi) if gi.isdigit() else 1 << 30, gi)


def _merge_labels(into: dict[str, str], labels: dict[str, str]) -> None:
    for k, v in labels.items():
        if v != "" and k not in into:
            into[k] = v


def _mib(v: float | None) -> int | None:
    return None if v is None else int(round(v * MIB))


def _sample(key: EntityKey, labels: dict[str, str], v: dict[str, float]) -> GpuSample:
    index, gi = key
    parent_uuid = labels.get("UUID") or labels.get("uuid") or ""
    name = labels.get("modelName", "")
    used = v.get("_fb_used")
    total = v.get("_fb_total")
    if total is None and used is not None and v.get("_fb_free") is not None:
        total = used + v["_fb_free"] + v.get("_fb_reserved", 0.0)
    extra = tuple(sorted((k, val) for k, val in labels.items() if k not in _MAPPED_LABELS))
    fields: dict[str, Any] = {k: val for k, val in v.items() if not k.startswith("_")}
    if "energy_joules" in fields:
        fields["energy_source"] = "counter"
    if gi is None:
        return GpuSample(
            index=index,
            uuid=parent_uuid,
            name=name,
            source="dcgm-exporter",
            memory_used_bytes=_mib(used),
            memory_total_bytes=_mib(total),
            labels=extra,
            **fields,
        )
    # A MIG instance: NVML's older MIG UUIDs read MIG-<parent uuid>/<gi>/<ci>;
    # the exporter gives no compute-instance id, so this names the GPU instance.
    profile = labels.get("GPU_I_PROFILE")
    return GpuSample(
        index=int(gi) if gi.isdigit() else index,
        uuid=f"MIG-{parent_uuid}/{gi}",
        name=f"{name} MIG {profile}" if profile else f"{name} MIG",
        source="dcgm-exporter",
        memory_used_bytes=_mib(used),
        memory_total_bytes=_mib(total),
        mig_parent=index,
        labels=extra,
        **fields,
    )


class DcgmExporterSource:
    """Reads one dcgm-exporter ``/metrics`` per tick; never raises from ``read``."""

    name = "dcgm-exporter"

    def __init__(self, url: str, timeout: float = 2.0) -> None:
        if not timeout > 0:
            raise ConfigError(f"HTTP timeout must be positive, not {timeout!r}")
        self.url = promtext.metrics_url(url, "dcgm-exporter")
        self.timeout = float(timeout)
        self._scraper = promtext.Scraper(self.url, self.timeout)
        self.notes: tuple[str, ...] = ()

    def _error(self, message: str) -> Reading:
        return Reading(errors=(SourceError(self.name, promtext.display_url(self.url), message),))

    def read(self) -> Reading:
        try:
            text = self._scraper.get()
            gpus, skipped = gpus_from_text(text, self.url)
        except EndpointError as exc:
            return self._error(str(exc))
        except Exception as exc:  # a bug must cost one reading, not the sampler
            log.warning("parsing %s failed", promtext.display_url(self.url), exc_info=True)
            return self._error(
                f"cannot read {promtext.display_url(self.url)}: {type(exc).__name__}: {exc}"
            )
        errors: tuple[SourceError, ...] = ()
        if skipped:
            shown = promtext.display_url(self.url)
            errors = (
                SourceError(self.name, shown, f"{shown}: skipped {skipped} malformed line(s)"),
            )
        return Reading(gpus=gpus, errors=errors)

    def close(self) -> None:
        self._scraper.close()


# Where a GPU page beside the engine is looked for: `headroom sim` serves its simulated GPU
# there, in dcgm-exporter's format, next to the engine's /metrics.
GPU_PAGE_PATH = "/gpu/metrics"


def gpu_page_beside(engine_url: str, timeout: float = 2.0) -> str | None:
    """The dcgm-exporter page on the engine's own host and port, or None where there is none.

    One GET; a page that is missing, not dcgm-exporter's, or names no GPU is None (the
    engine's host may simply serve no such page), never an error."""
    parts = urlsplit(engine_url if "://" in engine_url else f"http://{engine_url}")
    if not parts.hostname:
        return None
    url = f"{parts.scheme}://{parts.netloc}{GPU_PAGE_PATH}"
    scraper = promtext.Scraper(url, timeout)
    try:
        gpus, _ = gpus_from_text(scraper.get(), url)
    except Exception:  # any failure means: no GPU page here
        return None
    finally:
        scraper.close()
    return url if gpus else None
