"""Peak figures of the GPUs the roofline knows: dense (no sparsity) tensor FLOP/s, HBM and NVLink bandwidth.

From the vendors' datasheets. Dense figures are half the "with sparsity" ones
NVIDIA headlines. The simulator's presets (H100 SXM, H200, A100 80GB) use the
same entries: its GPU names contain these models' names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class GpuPeak:
    name: str
    bf16_flops: float  # dense bf16 tensor FLOP/s
    fp8_flops: float | None  # dense fp8 tensor FLOP/s; None where the GPU has no fp8
    hbm_bytes_per_s: float  # device memory bandwidth
    # NVLink, all links of one GPU, transmit plus receive (NVIDIA's "900 GB/s" for the H100
    # SXM is 450 GB/s each way); None where the GPU has no NVLink.
    nvlink_bytes_per_s: float | None = None

    def flops(self, precision: str = "bf16") -> float:
        if precision == "fp8" and self.fp8_flops is not None:
            return self.fp8_flops
        return self.bf16_flops

    def ridge(self, precision: str = "bf16") -> float:
        """Arithmetic intensity (FLOP/byte) where the roofline turns from memory to compute."""
        return self.flops(precision) / self.hbm_bytes_per_s


T = 1e12
GPU_PEAKS: dict[str, GpuPeak] = {
    p.name: p
    for p in (
        GpuPeak("H100 SXM", 989.4 * T, 1978.9 * T, 3.35 * T, 0.9 * T),
        GpuPeak("H100 PCIe", 756.5 * T, 1513.0 * T, 2.0 * T, 0.6 * T),  # NVLink bridge
        GpuPeak("H100 NVL", 835.5 * T, 1670.5 * T, 3.9 * T, 0.6 * T),
        GpuPeak("H200", 989.4 * T, 1978.9 * T, 4.8 * T, 0.9 * T),
        GpuPeak("A100 40GB", 312.0 * T, None, 1.555 * T, 0.6 * T),
        GpuPeak("A100 80GB", 312.0 * T, None, 2.039 * T, 0.6 * T),
        GpuPeak("L40S", 362.05 * T, 733.0 * T, 0.864 * T),  # no NVLink
        GpuPeak("B200", 2250.0 * T, 4500.0 * T, 8.0 * T, 1.8 * T),
    )
}


def _norm(s: str) -> str:
    return re.sub(r"[^a-z0-9]+", " ", s.lower()).strip()


def peak_for_key(key: str) -> GpuPeak | None:
    """A table entry by its key, ignoring case, spaces and dashes ("h200", "a100-80gb")."""
    wanted = _norm(key).replace(" ", "")
    for name, peak in GPU_PEAKS.items():
        if _norm(name).replace(" ", "") == wanted:
            return peak
    return match_gpu(key)


def match_gpu(name: str, memory_total_bytes: int | None = None) -> GpuPeak | None:
    """The table entry for a GPU as NVML or DCGM names it ("NVIDIA H100 80GB HBM3")."""
    words = set(_norm(name).split())
    if "b200" in words:
        return GPU_PEAKS["B200"]
    if "h200" in words:
        return GPU_PEAKS["H200"]
    if "h100" in words:
        if "pcie" in words:
            return GPU_PEAKS["H100 PCIe"]
        if "nvl" in words:
            return GPU_PEAKS["H100 NVL"]
        return GPU_PEAKS["H100 SXM"]  # "H100 80GB HBM3", "H100 SXM5 80GB"
    if "a100" in words:
        if "80gb" in words:
            return GPU_PEAKS["A100 80GB"]
        if "40gb" in words:
            return GPU_PEAKS["A100 40GB"]
        if memory_total_bytes is not None:
            return GPU_PEAKS["A100 80GB" if memory_total_bytes > 50 * 2**30 else "A100 40GB"]
        return GPU_PEAKS["A100 80GB"]
    if "l40s" in words:
        return GPU_PEAKS["L40S"]
    return None
