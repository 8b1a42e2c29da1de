"""Build the sources a command asked for; a source that cannot start becomes a note, not a crash."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from urllib.parse import urlsplit

from monitor.core.errors import SourceUnavailable
from monitor.sources.base import Source

log = logging.getLogger(__name__)

_LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1", "0.0.0.0", ""}


def local_ports(urls: Sequence[str]) -> list[int]:
    """Ports of the URLs served on this host: the host source finds the engine's processes by them."""
    ports = []
    for url in urls:
        parts = urlsplit(url if "://" in url else f"http://{url}")
        if (parts.hostname or "") in _LOCAL_HOSTS or (parts.hostname or "").startswith("127."):
            ports.append(parts.port or (443 if parts.scheme == "https" else 80))
    return ports


def build_sources(
    vllm_urls: Sequence[str] = (),
    dcgm_exporter_url: str | None = None,
    nvml: bool = True,
    dcgm: bool = False,
    gpm: bool = True,
    gpu_util_every_s: float = 0.0,
    gpu_processes_every_s: float = 5.0,
    gpu_energy_every_s: float = 30.0,
    host: bool = True,
    host_pids: Sequence[int] = (),
    timeout: float = 2.0,
    engine: str | None = None,
    gpu_indices: Sequence[int] | None = None,
    one_shot: bool = False,
    find_gpu_page: bool = False,
) -> tuple[list[Source], list[str]]:
    """Return the sources that started and one-line notes for those that could not.

    ``engine`` forces the serving engine's name table (vllm, sglang, ...) for every URL;
    None finds it from each page. ``one_shot``: for one reading (snapshot), whose notes
    promise no later look. ``find_gpu_page``: with no dcgm-exporter URL given and no GPU read
    here, look for one at /gpu/metrics beside each engine (where `headroom sim` serves its GPU)."""
    sources: list[Source] = []
    notes: list[str] = []
    if nvml:
        from monitor.sources.nvml import NvmlSource

        try:
            src = NvmlSource(
                gpm=gpm,
                indices=gpu_indices,
                util_every_s=gpu_util_every_s,
                processes_every_s=gpu_processes_every_s,
                energy_every_s=gpu_energy_every_s,
            )
            sources.append(src)
            notes.extend(getattr(src, "notes", ()))
        except SourceUnavailable as exc:
            notes.append(str(exc))
    if dcgm:
        from monitor.sources.dcgm import DcgmSource

        try:
            sources.append(DcgmSource(indices=gpu_indices))
        except SourceUnavailable as exc:
            notes.append(str(exc))
    if find_gpu_page and not dcgm_exporter_url and not sources:
        # No GPU read here (NVML off or missing, no DCGM): the engine's host may serve one.
        from monitor.sources.dcgm_exporter import gpu_page_beside

        for url in vllm_urls:
            dcgm_exporter_url = gpu_page_beside(url, timeout)
            if dcgm_exporter_url:
                notes.append(f"GPU readings from {dcgm_exporter_url}, found beside the engine")
                break
    if dcgm_exporter_url:
        from monitor.sources.dcgm_exporter import DcgmExporterSource

        sources.append(DcgmExporterSource(dcgm_exporter_url, timeout=timeout))
    if vllm_urls:
        from monitor.sources.vllm import VllmSource

        for url in vllm_urls:
            sources.append(VllmSource(url, timeout=timeout, flavour=engine))
    if host:
        from monitor.sources.host import HostSource

        host_source = HostSource(
            pids=tuple(host_pids), ports=tuple(local_ports(vllm_urls)), one_shot=one_shot
        )
        sources.append(host_source)
        notes.extend(getattr(host_source, "notes", ()))
    return sources, notes
