"""Workloads for several GPUs: one process per GPU, PyTorch with NCCL, for a fixed time.

Run on a machine with two or more CUDA GPUs:
    python bench/gpu/multi_workloads.py NAME --seconds S [--gpus N]

- allreduce: a loop of large all-reduces (256 MiB of bf16): NVLink busy, SMs mostly idle.
- compute: each rank runs a bf16 matmul loop, no communication: tensor cores busy.
- tp-matmul: a tensor-parallel MLP per layer (column-parallel matmul, row-parallel
  matmul, all-reduce of the activations), sized so the all-reduce is a large share
  of each layer; the ranks measure that share themselves and report it.

Each rank prints one JSON line at the end. NVLink multicast (NVLS) stays off: the
lent machines ask for it (NCCL_NVLS_ENABLE=0 and the symmetric-memory switches).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import time
from collections.abc import Callable
from typing import Any

# Before torch or NCCL read them: no NVLink multicast, on any path.
os.environ["NCCL_NVLS_ENABLE"] = "0"
os.environ["TORCH_SYMM_MEM_DISABLE_MULTICAST"] = "1"
os.environ["NVSHMEM_DISABLE_NVLS"] = "1"

import torch  # noqa: E402 - after the environment above
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from workloads import name_thread  # noqa: E402 - the script's folder is on sys.path

Result = dict[str, Any]
WORKLOADS: dict[str, Callable[[argparse.Namespace, int, int], Result]] = {}


def workload(
    name: str,
) -> Callable[
    [Callable[[argparse.Namespace, int, int], Result]],
    Callable[[argparse.Namespace, int, int], Result],
]:
    def wrap(
        fn: Callable[[argparse.Namespace, int, int], Result],
    ) -> Callable[[argparse.Namespace, int, int], Result]:
        WORKLOADS[name] = fn
        return fn

    return wrap


def stop_together(seconds: float, every: int = 10) -> Callable[[int], bool]:
    """True while time remains, decided by rank 0 and shared, so no rank waits alone in a
    collective the others have left. Checked every ``every`` steps."""
    end = time.monotonic() + seconds
    flag = torch.ones(1, device="cuda")
    state = {"go": True}

    def running(step: int) -> bool:
        if step % every:
            return state["go"]
        flag.fill_(1.0 if time.monotonic() < end else 0.0)
        dist.broadcast(flag, src=0)
        state["go"] = bool(flag.item())
        return state["go"]

    return running


@workload("allreduce")
def allreduce(args: argparse.Namespace, rank: int, world: int) -> Result:
    numel = args.allreduce_mib * 2**20 // 2  # bf16
    x = torch.ones(numel, device="cuda", dtype=torch.bfloat16)
    running, steps = stop_together(args.seconds), 0
    torch.cuda.synchronize()
    t0 = time.monotonic()
    while running(steps):
        dist.all_reduce(x)
        x.mul_(1.0 / world)  # keep the values finite
        steps += 1
    torch.cuda.synchronize()
    dt = time.monotonic() - t0
    size = numel * 2
    algbw = size * steps / dt
    # NCCL's bus bandwidth: what each rank's links carry in a ring all-reduce.
    return {
        "allreduces": steps,
        "mib": args.allreduce_mib,
        "algbw_gb_s": algbw / 1e9,
        "busbw_gb_s": algbw * 2 * (world - 1) / world / 1e9,
    }


@workload("compute")
def compute(args: argparse.Namespace, rank: int, world: int) -> Result:
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    end, steps = time.monotonic() + args.seconds, 0
    t0 = time.monotonic()
    while time.monotonic() < end:
        for _ in range(10):
            a @ b
        torch.cuda.synchronize()
        steps += 10
    dt = time.monotonic() - t0
    dist.barrier()
    return {"matmuls": steps, "tflops": 2 * n**3 * steps / dt / 1e12}


def _time_ms(fn: Callable[[], None], reps: int) -> float:
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    fn()
    torch.cuda.synchronize()
    start.record()
    for _ in range(reps):
        fn()
    stop.record()
    torch.cuda.synchronize()
    return start.elapsed_time(stop) / reps


@workload("tp-matmul")
def tp_matmul(args: argparse.Namespace, rank: int, world: int) -> Result:
    t, h, f = args.tokens, args.hidden, args.ffn_per_rank
    layers = args.layers
    torch.manual_seed(rank)
    x = torch.randn(t, h, device="cuda", dtype=torch.bfloat16) * 0.01
    w1 = [torch.randn(h, f, device="cuda", dtype=torch.bfloat16) * 0.01 for _ in range(layers)]
    w2 = [torch.randn(f, h, device="cuda", dtype=torch.bfloat16) * 0.01 for _ in range(layers)]
    out = torch.empty(t, h, device="cuda", dtype=torch.bfloat16)

    def layer_compute(i: int) -> None:
        # Column-parallel (this rank's slice of the FFN), then row-parallel back to hidden.
        torch.matmul(torch.matmul(x, w1[i]), w2[i], out=out)

    def layer_comm() -> None:
        dist.all_reduce(out)

    # Each part alone, so the record can say what share of a layer the all-reduce takes.
    compute_ms = _time_ms(lambda: layer_compute(0), 10)
    comm_ms = _time_ms(layer_comm, 10)
    running, steps = stop_together(args.seconds, every=1), 0
    torch.cuda.synchronize()
    t0 = time.monotonic()
    while running(steps):
        for i in range(layers):
            layer_compute(i)
            layer_comm()
            x.copy_(out).mul_(0.5)
        steps += 1
    torch.cuda.synchronize()
    dt = time.monotonic() - t0
    return {
        "steps": steps,
        "layers": layers,
        "tokens": t,
        "hidden": h,
        "ffn_per_rank": f,
        "layer_compute_ms": compute_ms,
        "layer_allreduce_ms": comm_ms,
        "allreduce_share": comm_ms / (compute_ms + comm_ms),
        "step_ms": 1000 * dt / max(1, steps),
    }


def rank_main(rank: int, args: argparse.Namespace, world: int) -> None:
    name_thread(f"rank{rank}")
    torch.cuda.set_device(rank)
    device = torch.device("cuda", rank)
    try:
        dist.init_process_group("nccl", rank=rank, world_size=world, device_id=device)
    except TypeError:  # torch before 2.3 has no device_id
        dist.init_process_group("nccl", rank=rank, world_size=world)
    try:
        result: Result = {"workload": args.name, "rank": rank, "world": world, "pid": os.getpid()}
        result.update(WORKLOADS[args.name](args, rank, world))
        # One write for the line and its newline: the ranks share a pipe, and print's two
        # writes let another rank's line land between them.
        os.write(1, (json.dumps(result) + "\n").encode())
    finally:
        dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("name", choices=sorted(WORKLOADS))
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--gpus", type=int, default=0, help="0: every visible GPU")
    p.add_argument("--allreduce-mib", type=int, default=256)
    p.add_argument("--tokens", type=int, default=8192)
    p.add_argument("--hidden", type=int, default=8192)
    p.add_argument("--ffn-per-rank", type=int, default=512)
    p.add_argument("--layers", type=int, default=8)
    args = p.parse_args()
    world = args.gpus or torch.cuda.device_count()
    if world < 2:
        raise SystemExit(f"{args.name}: needs at least 2 GPUs, found {world}")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(free_port()))
    mp.spawn(rank_main, args=(args, world), nprocs=world, join=True)


if __name__ == "__main__":
    main()
