"""The next command for a profiler that sees kernels, written for this box and its engine PID.

A GPU verdict names a resource; which kernels use it takes a kernel profiler.
Pure: the caller gives the engine's PID (from the host source) and its URL.
"""

from __future__ import annotations

NSYS_S = 20  # seconds of timeline: a few hundred steps, a report of tens of MB


def nsys(pid: int | None) -> str:
    """Nsight Systems: the timeline, with the gaps between kernels and what the CPU did then.

    nsys cannot attach to a running process; it profiles one it starts (or a process
    tree launched under ``nsys launch``), so the command restarts the engine under it."""
    target = f"the engine (now PID {pid})" if pid else "the engine"
    return (
        f"nsys profile -t cuda,nvtx,osrt --cuda-graph-trace=node --delay 60 --duration {NSYS_S} "
        f"-o headroom-%p <the engine's command>  (restarts {target} under Nsight Systems; "
        "nsys stats --report cuda_gpu_kern_sum,cuda_api_sum on the .nsys-rep)"
    )


def ncu(pid: int | None) -> str:
    """Nsight Compute on the top kernel: why it is slow (memory, compute, occupancy)."""
    return (
        "ncu --target-processes all -k regex:<top kernel from the nsys report> -c 5 "
        "--set full -o headroom-kernel <the engine's command>"
        + (f"  (restart PID {pid}'s engine under it)" if pid else "")
    )


def vllm_profile(url: str | None) -> str:
    where = url or "http://HOST:PORT"
    return f"headroom profile --vllm {where} --seconds 5"


def gpu_next_steps(cause: str, pid: int | None, url: str | None) -> str:
    """One sentence with the exact commands, for a GPU verdict's fix."""
    first = vllm_profile(url) if url else None
    parts = []
    if first:
        parts.append(f"vLLM's torch profiler: `{first}`")
    if cause in ("launch-bound", "comm-bound", "transfer-bound"):
        parts.append(f"the timeline and its gaps: `{nsys(pid)}`")
        if cause == "comm-bound":
            parts.append("NCCL kernels show as ncclDevKernel_* in it")
        if cause == "transfer-bound":
            parts.append("copies show as Memcpy HtoD / DtoH rows in it")
    else:
        parts.append(f"the top kernel: `{ncu(pid)}`")
    return "which kernels: " + "; ".join(parts)
