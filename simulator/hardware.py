"""GPU and model presets, and the roofline that turns one engine step's work into GPU time.

Peak figures are the vendors' dense bf16 tensor FLOP/s and HBM bandwidth. A step's
time is the larger of its FLOPs over the achievable compute rate and its bytes over
the achievable bandwidth, plus a fixed cost per kernel; the same split gives the
tensor-pipe and DRAM activity that the simulated dcgm-exporter reports.
"""

from __future__ import annotations

from dataclasses import dataclass

T = 1e12
GiB = 2**30


@dataclass(frozen=True, slots=True)
class GpuSpec:
    key: str
    model_name: str  # as NVML / dcgm-exporter name it (the modelName label)
    peak_flops: float  # dense bf16 tensor FLOP/s
    hbm_bytes_per_s: float
    num_sms: int
    memory_bytes: int
    tdp_watts: float
    idle_watts: float
    sm_clock_max_mhz: float
    sm_clock_idle_mhz: float
    mem_clock_mhz: float
    # NVLink, all links of one GPU, each way (the datasheets' 900 GB/s is both ways).
    nvlink_bytes_per_s: float = 0.0


@dataclass(frozen=True, slots=True)
class ModelSpec:
    key: str
    served_name: str
    params: float
    num_layers: int
    hidden_size: int
    num_kv_heads: int
    head_dim: int
    dtype_bytes: int = 2  # bf16

    @property
    def weight_bytes(self) -> float:
        return self.params * self.dtype_bytes

    @property
    def kv_bytes_per_token(self) -> int:
        # K and V, every layer, every KV head.
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.dtype_bytes


GPUS: dict[str, GpuSpec] = {
    g.key: g
    for g in (
        GpuSpec(
            "h100-sxm", "NVIDIA H100 80GB HBM3", 989.4 * T, 3.35 * T, 132, 80 * GiB,
            700.0, 70.0, 1980.0, 345.0, 2619.0, 450e9,
        ),
        GpuSpec(
            "h200", "NVIDIA H200", 989.4 * T, 4.8 * T, 132, 141 * GiB,
            700.0, 75.0, 1980.0, 345.0, 3201.0, 450e9,
        ),
        GpuSpec(
            "a100-80gb", "NVIDIA A100-SXM4-80GB", 312.0 * T, 2.039 * T, 108, 80 * GiB,
            400.0, 55.0, 1410.0, 210.0, 1593.0, 300e9,
        ),
    )
}  # fmt: skip

MODELS: dict[str, ModelSpec] = {
    m.key: m
    for m in (
        # Llama-3.1-8B and Llama-3.2-1B shapes (grouped-query attention, 8 KV heads).
        ModelSpec("llama-8b", "llama-3.1-8b", 8.03e9, 32, 4096, 8, 128),
        ModelSpec("llama-1b", "llama-3.2-1b", 1.24e9, 16, 2048, 8, 64),
    )
}


@dataclass(frozen=True, slots=True)
class StepWork:
    """What one engine step asks of each GPU (of ``tp`` tensor-parallel ranks)."""

    tokens: int
    flops: float
    read_bytes: float
    write_bytes: float
    tp: int = 1
    allreduces: int = 0  # all-reduces of the activations per step
    allreduce_bytes: float = 0.0  # their payload, summed


@dataclass(frozen=True, slots=True)
class KernelModel:
    """How a step's work is cut into kernels and launched."""

    kernels_per_step: int
    kernel_fixed_s: float  # per-kernel minimum duration (ramp, tail, tiny kernels)
    launch_overhead_s: float  # host CPU per launch
    cuda_graphs: bool
    compute_efficiency: float  # achievable share of peak FLOP/s in big GEMMs
    memory_efficiency: float  # achievable share of peak bandwidth
    # Share of SMs a tiny kernel fills; the roofline part fills (nearly) all of them.
    tiny_kernel_sm_share: float = 0.015
    big_kernel_sm_share: float = 0.97
    # Achievable share of the NVLink peak in a ring all-reduce of large messages, and the
    # fixed cost of one all-reduce (launch, handshakes, the ring's 2(N-1) hops).
    comm_efficiency: float = 0.8
    allreduce_latency_s: float = 10e-6


@dataclass(frozen=True, slots=True)
class GpuCost:
    """One step on the GPU: its time and the activity integrals the timeline sums."""

    compute_s: float
    memory_s: float
    roofline_s: float
    busy_s: float  # time with any kernel running
    launch_cpu_s: float  # host CPU spent launching
    phase_s: float  # GPU phase wall time (launches can leave gaps)
    sm_active_s: float  # integral of the SM-active share over the phase
    occupancy_s: float
    tensor_s: float
    dram_s: float
    comm_s: float = 0.0  # time in all-reduces
    nvlink_bytes: float = 0.0  # sent over NVLink by this GPU (as many received)

    @property
    def compute_bound(self) -> bool:
        return self.compute_s >= self.memory_s


# A tensor pipe "active" cycle is not a peak-rate cycle: at the achievable GEMM
# rate the pipe reads ~93% active (DESIGN: the 8192^3 matmul row), DRAM likewise.
_TENSOR_ISSUE = 0.75
_DRAM_ISSUE = 0.95
# Resident warps over the maximum: GEMMs run few fat warps, streaming kernels many.
_OCC_COMPUTE = 0.14
_OCC_MEMORY = 0.8
_OCC_TINY = 0.01
# NCCL's ring kernels hold one SM per channel (16-32 channels of 132 SMs on an H100).
_NCCL_SM_SHARE = 0.2
_OCC_NCCL = 0.03


def step_work(model: ModelSpec, chunks: list[tuple[int, int]], tp: int = 1) -> StepWork:
    """The work of one step on each of ``tp`` GPUs; ``chunks`` are (tokens computed now,
    tokens already in KV) per sequence.

    Tensor parallelism (Megatron layout) splits every layer's weights, heads and KV cache
    across the ranks and all-reduces the activations twice per layer (after attention
    and after the MLP): ``tokens x hidden`` values each time.
    """
    tokens = 0
    attn_flops = 0.0
    kv_read = 0.0
    # Each new token attends to every earlier one: QK^T and AV, 2 FLOPs per MAC.
    per_pair = 4.0 * model.num_layers * model.hidden_size
    kv_bytes = model.kv_bytes_per_token
    for n, past in chunks:
        tokens += n
        attn_flops += per_pair * (n * past + n * (n + 1) / 2)
        kv_read += past * kv_bytes
    flops = 2.0 * model.params * tokens + attn_flops
    read = model.weight_bytes + kv_read
    write = tokens * model.kv_bytes_per_token
    if tp == 1:
        return StepWork(tokens, flops, read, write)
    allreduces = 2 * model.num_layers
    payload = allreduces * tokens * model.hidden_size * model.dtype_bytes
    return StepWork(tokens, flops / tp, read / tp, write / tp, tp, allreduces, payload)


def allreduce_s(gpu: GpuSpec, work: StepWork, kernels: KernelModel) -> tuple[float, float]:
    """Time in the step's all-reduces and the bytes each GPU sends meanwhile.

    A ring all-reduce over N ranks sends (and receives) 2(N-1)/N of the payload per
    rank: reduce-scatter, then all-gather.
    """
    if work.tp <= 1 or work.allreduces == 0:
        return 0.0, 0.0
    sent = 2.0 * (work.tp - 1) / work.tp * work.allreduce_bytes
    rate = gpu.nvlink_bytes_per_s * kernels.comm_efficiency
    return sent / rate + work.allreduces * kernels.allreduce_latency_s, sent


def gpu_cost(gpu: GpuSpec, work: StepWork, kernels: KernelModel) -> GpuCost:
    compute_s = work.flops / (gpu.peak_flops * kernels.compute_efficiency)
    memory_s = (work.read_bytes + work.write_bytes) / (
        gpu.hbm_bytes_per_s * kernels.memory_efficiency
    )
    roofline_s = max(compute_s, memory_s)
    fixed_s = kernels.kernels_per_step * kernels.kernel_fixed_s
    # Tensor-parallel ranks cannot start a layer before the last one's all-reduce ends.
    comm_s, sent = allreduce_s(gpu, work, kernels)
    busy_s = roofline_s + fixed_s + comm_s
    launches = 1 if kernels.cuda_graphs else kernels.kernels_per_step
    launch_cpu_s = launches * kernels.launch_overhead_s
    # Without graphs the GPU cannot run ahead of the host: kernels shorter than a
    # launch leave gaps, so the phase lasts as long as the launches do.
    phase_s = max(busy_s, launch_cpu_s)
    occ = _OCC_COMPUTE if compute_s >= memory_s else _OCC_MEMORY
    return GpuCost(
        compute_s=compute_s,
        memory_s=memory_s,
        roofline_s=roofline_s,
        busy_s=busy_s,
        launch_cpu_s=launch_cpu_s,
        phase_s=phase_s,
        sm_active_s=roofline_s * kernels.big_kernel_sm_share
        + fixed_s * kernels.tiny_kernel_sm_share
        + comm_s * _NCCL_SM_SHARE,
        occupancy_s=roofline_s * occ + fixed_s * _OCC_TINY + comm_s * _OCC_NCCL,
        tensor_s=min(roofline_s, work.flops / (gpu.peak_flops * _TENSOR_ISSUE)),
        dram_s=min(
            roofline_s, (work.read_bytes + work.write_bytes) / (gpu.hbm_bytes_per_s * _DRAM_ISSUE)
        )
        # The reduction reads its two inputs and writes the sum: ~3 bytes of HBM per byte sent.
        + min(comm_s, 3.0 * sent / (gpu.hbm_bytes_per_s * _DRAM_ISSUE)),
        comm_s=comm_s,
        nvlink_bytes=sent,
    )
