"""GPU workloads that reproduce each GPU-side cause for real, one per process, for a fixed time.

Run on a CUDA machine: ``python bench/gpu/workloads.py NAME --seconds S``. Each
prints one JSON line at the end with what it did (steps/s, kernel times), so the
runner can check that a workload was what it claims to be. The Story-B loop
calibrates its GPU part from measured kernel times, not from guesses.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import threading
import time
from collections.abc import Callable

import torch

WORKLOADS: dict[str, Callable[[argparse.Namespace], dict[str, float]]] = {}


def workload(
    name: str,
) -> Callable[
    [Callable[[argparse.Namespace], dict[str, float]]],
    Callable[[argparse.Namespace], dict[str, float]],
]:
    def wrap(
        fn: Callable[[argparse.Namespace], dict[str, float]],
    ) -> Callable[[argparse.Namespace], dict[str, float]]:
        WORKLOADS[name] = fn
        return fn

    return wrap


def name_thread(name: str) -> None:
    """Give this thread an OS name, so headroom's host source shows it like vLLM's EngineCore."""
    try:
        with open(f"/proc/self/task/{threading.get_native_id()}/comm", "w") as f:
            f.write(name[:15])
    except OSError:
        pass


def until(seconds: float) -> Callable[[], bool]:
    end = time.monotonic() + seconds
    return lambda: time.monotonic() < end


@workload("idle")
def idle(args: argparse.Namespace) -> dict[str, float]:
    torch.zeros(1, device="cuda")
    time.sleep(args.seconds)
    return {}


def _repeat(seconds: float, step: Callable[[], object], batch: int = 10) -> tuple[int, float]:
    """Run ``step`` in batches, synchronising after each, for ``seconds``: (steps, seconds)."""
    running, steps = until(seconds), 0
    t0 = time.monotonic()
    while running():
        for _ in range(batch):
            step()
        torch.cuda.synchronize()
        steps += batch
    return steps, time.monotonic() - t0


@workload("matmul")
def matmul(args: argparse.Namespace) -> dict[str, float]:
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    steps, dt = _repeat(args.seconds, lambda: a @ b)
    return {"matmuls": steps, "tflops": 2 * n**3 * steps / dt / 1e12}


@workload("copy")
def copy(args: argparse.Namespace) -> dict[str, float]:
    src = torch.empty(2**30, dtype=torch.uint8, device="cuda").random_(0, 255)
    dst = torch.empty_like(src)
    steps, dt = _repeat(args.seconds, lambda: dst.copy_(src))
    return {"copies": steps, "tb_per_s_read_plus_write": 2 * 2**30 * steps / dt / 1e12}


@workload("h2d")
def h2d(args: argparse.Namespace) -> dict[str, float]:
    """Pinned host-to-device copies of 256 MiB, one small kernel after each: the GPU waits on
    PCIe (what CPU offload of weights or KV does to a serving engine)."""
    host = torch.empty(256 * 2**20, dtype=torch.uint8).pin_memory()
    dev = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")
    x = torch.zeros(32, device="cuda")

    def step() -> None:
        dev.copy_(host, non_blocking=True)
        x.add_(1.0)

    steps, dt = _repeat(args.seconds, step)
    return {"copies": steps, "gb_per_s": 256 * 2**20 * steps / dt / 1e9}


@workload("tiny")
def tiny(args: argparse.Namespace) -> dict[str, float]:
    """A 32-element add in a loop: every kernel is a launch and nothing else."""
    name_thread("launcher")
    x = torch.zeros(32, device="cuda")
    running, steps = until(args.seconds), 0
    while running():
        for _ in range(1000):
            x.add_(1.0)
        torch.cuda.synchronize()
        steps += 1000
    return {"kernels_per_s": steps / args.seconds}


def _small_model() -> tuple[list[torch.Tensor], torch.Tensor]:
    torch.manual_seed(0)
    hidden, layers = 1024, 24
    weights = [
        torch.randn(hidden, hidden, device="cuda", dtype=torch.bfloat16) / hidden**0.5
        for _ in range(layers)
    ]
    x = torch.randn(64, hidden, device="cuda", dtype=torch.bfloat16)
    return weights, x


def _small_step(weights: list[torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    # A decoder-like layer stack at batch 64: small GEMMs plus elementwise ops,
    # many short kernels per step, as in a small model's eager decode.
    h = x
    for w in weights:
        y = h @ w
        y = torch.nn.functional.gelu(y)
        h = h + y * 0.5
        h = h * torch.rsqrt(h.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(h.dtype)
    return h


def _small_step_graph(
    weights: list[torch.Tensor], x: torch.Tensor
) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
    """The small step captured once as a CUDA graph, and the input it reads: keep both alive."""
    static_x = x.clone()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):  # warm up on a side stream, as CUDA graph capture asks
            _small_step(weights, static_x)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        _small_step(weights, static_x)
    return graph, static_x


@workload("smallstep")
def smallstep(args: argparse.Namespace) -> dict[str, float]:
    name_thread("EngineCore")
    weights, x = _small_model()
    running, steps = until(args.seconds), 0
    while running():
        _small_step(weights, x)
        torch.cuda.synchronize()
        steps += 1
    return {"steps_per_s": steps / args.seconds}


@workload("smallstep-graph")
def smallstep_graph(args: argparse.Namespace) -> dict[str, float]:
    """The same step captured once as a CUDA graph and replayed: one launch per step."""
    name_thread("EngineCore")
    graph, _static = _small_step_graph(*_small_model())
    running, steps = until(args.seconds), 0
    while running():
        for _ in range(10):
            graph.replay()
        torch.cuda.synchronize()
        steps += 10
    return {"steps_per_s": steps / args.seconds}


def _calibrated_gpu_burst(target_ms: float) -> Callable[[], None]:
    """A GPU burst of about ``target_ms``, sized from measured matmul times."""
    n = 4096
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(5):
        a @ b
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(20):
        a @ b
    end.record()
    torch.cuda.synchronize()
    per_mm = start.elapsed_time(end) / 20
    reps = max(1, round(target_ms / per_mm))

    def burst() -> None:
        for _ in range(reps):
            a @ b

    return burst


def _cpu_burn(ms: float, buf: bytes, bytes_per_ms: float) -> None:
    """Burn about ``ms`` of this thread's CPU (hashing releases the GIL but costs real cycles)."""
    n = int(ms * bytes_per_ms)
    view = memoryview(buf)
    while n > 0:
        chunk = min(n, len(buf))
        hashlib.sha256(view[:chunk]).digest()
        n -= chunk


def _calibrate_burn() -> tuple[bytes, float]:
    buf = os.urandom(1 << 20)
    t0 = time.process_time()
    for _ in range(50):
        hashlib.sha256(buf).digest()
    dt = time.process_time() - t0
    return buf, 50 * len(buf) / (dt * 1000)


def _story_b(args: argparse.Namespace, overlap: bool) -> dict[str, float]:
    name_thread("EngineCore")
    burst = _calibrated_gpu_burst(args.gpu_ms)
    buf, bpm = _calibrate_burn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    burst()
    end.record()
    torch.cuda.synchronize()
    measured_gpu_ms = start.elapsed_time(end)
    running, steps = until(args.seconds), 0
    t0 = time.monotonic()
    while running():
        burst()  # asynchronous: returns once the kernels are queued
        if overlap:
            _cpu_burn(args.cpu_ms, buf, bpm)  # CPU of the next step while the GPU runs
            torch.cuda.synchronize()
        else:
            torch.cuda.synchronize()
            _cpu_burn(args.cpu_ms, buf, bpm)
        steps += 1
    dt = time.monotonic() - t0
    step_ms = 1000 * dt / max(1, steps)
    return {
        "steps_per_s": steps / dt,
        "step_ms": step_ms,
        "gpu_ms_measured": measured_gpu_ms,
        "cpu_ms": args.cpu_ms,
        "expected_busy_fraction": measured_gpu_ms / step_ms,
    }


@workload("storyb")
def storyb(args: argparse.Namespace) -> dict[str, float]:
    return _story_b(args, overlap=False)


@workload("storyb-overlap")
def storyb_overlap(args: argparse.Namespace) -> dict[str, float]:
    return _story_b(args, overlap=True)


def _decode(args: argparse.Namespace, batch: int) -> dict[str, float]:
    """Random-weight transformer decode: one token per sequence per step, KV cache read each step."""
    name_thread("EngineCore")
    torch.manual_seed(0)
    hidden, layers, heads, ctx = 4096, 8, 32, 1024
    dt = torch.bfloat16
    qkv = [torch.randn(hidden, 3 * hidden, device="cuda", dtype=dt) / 64 for _ in range(layers)]
    out = [torch.randn(hidden, hidden, device="cuda", dtype=dt) / 64 for _ in range(layers)]
    up = [torch.randn(hidden, 4 * hidden, device="cuda", dtype=dt) / 64 for _ in range(layers)]
    down = [torch.randn(4 * hidden, hidden, device="cuda", dtype=dt) / 128 for _ in range(layers)]
    k_cache = [
        torch.randn(batch, heads, ctx, hidden // heads, device="cuda", dtype=dt)
        for _ in range(layers)
    ]
    v_cache = [
        torch.randn(batch, heads, ctx, hidden // heads, device="cuda", dtype=dt)
        for _ in range(layers)
    ]
    x = torch.randn(batch, hidden, device="cuda", dtype=dt)

    def step() -> torch.Tensor:
        h = x
        for i in range(layers):
            q, _, _ = (h @ qkv[i]).split(hidden, dim=-1)
            q = q.view(batch, heads, 1, hidden // heads)
            a = torch.nn.functional.scaled_dot_product_attention(q, k_cache[i], v_cache[i])
            h = h + a.reshape(batch, hidden) @ out[i]
            h = h + torch.nn.functional.silu(h @ up[i]) @ down[i]
        return h

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    running, steps = until(args.seconds), 0
    t0 = time.monotonic()
    while running():
        step()
        torch.cuda.synchronize()
        steps += 1
    elapsed = time.monotonic() - t0
    return {"steps_per_s": steps / elapsed, "tokens_per_s": batch * steps / elapsed}


@workload("decode-b1")
def decode_b1(args: argparse.Namespace) -> dict[str, float]:
    return _decode(args, 1)


@workload("decode-b64")
def decode_b64(args: argparse.Namespace) -> dict[str, float]:
    return _decode(args, 64)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("name", choices=sorted(WORKLOADS))
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--gpu-ms", type=float, default=12.0, help="Story B: GPU part of a step")
    p.add_argument("--cpu-ms", type=float, default=28.0, help="Story B: CPU part of a step")
    args = p.parse_args()
    result = WORKLOADS[args.name](args)
    print(json.dumps({"workload": args.name, "pid": os.getpid(), **result}), flush=True)


if __name__ == "__main__":
    main()
