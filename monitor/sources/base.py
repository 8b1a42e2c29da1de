"""The interface every source implements."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from monitor.sources.samples import EngineSample, GpuSample, HostSample, SourceError


@dataclass(frozen=True, slots=True)
class Reading:
    """What one source read on one tick; the sampler merges readings into a Snapshot."""

    gpus: tuple[GpuSample, ...] = ()
    engines: tuple[EngineSample, ...] = ()
    host: HostSample | None = None
    errors: tuple[SourceError, ...] = ()


@runtime_checkable
class Source(Protocol):
    """A source reads on each tick and never raises from ``read``: failures become SourceErrors.

    Construction may raise ``monitor.core.errors.SourceUnavailable`` when the source
    cannot work at all (NVML library missing, no GPU): the caller says so in one
    line and goes on with the other sources.
    """

    name: str

    def read(self) -> Reading: ...

    def close(self) -> None: ...
