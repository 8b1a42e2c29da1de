"""What headroom's sampling costs on a real GPU, beside nvitop-exporter sampling the same GPU.

Each configuration runs in its own process (so its CPU time is its own) while a
bf16 matmul loop keeps the GPU busy; CPU per tick = process CPU time over the
ticks, as a share of one core at the interval. nvitop-exporter runs beside the
full configuration at the same interval, scraped every 5 s as Prometheus would.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from bench import fixture_server  # noqa: E402

FIXTURE = ROOT / "tests" / "fixtures" / "vllm-0.32.0-cpu-metrics-under-load.txt"

# The agent's default sampling: NVML + GPM with the duty cycle over 5 s spans, the host
# source and one vLLM endpoint, at 1 s on every GPU. Each configuration changes a few of these.
_AGENT = {"gpm": True, "util_every": 5.0, "host": True, "vllm": True, "interval": 1.0,
          "seconds": 20.0, "gpus": None}  # fmt: skip
_GPM_ONLY = {**_AGENT, "host": False, "vllm": False, "seconds": 15.0}

CONFIGS = {
    # What `headroom agent` runs by default, on one GPU and then on every GPU.
    "agent-1gpu-1s": {**_AGENT, "gpus": 1},
    # The same, with the host source as it was before reading threads from schedstat and
    # the CPU frequency every 10 s: psutil's threads() and cpu_freq() on every tick.
    "agent-1gpu-1s-old-host": {**_AGENT, "gpus": 1, "old_host": True},
    "agent-all-1s": dict(_AGENT),
    "gpm-all-1s-util-every-tick": {**_GPM_ONLY, "util_every": 0.0},
    "gpm-all-1s": dict(_GPM_ONLY),
    "nvml-all-1s": {**_GPM_ONLY, "gpm": False, "util_every": 0.0},
    "gpm-all-100ms": {**_GPM_ONLY, "interval": 0.1, "seconds": 8.0},
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_one(name: str, vllm_url: str | None, workload_pid: int | None) -> dict[str, object]:
    from monitor.read.sampler import Sampler
    from monitor.sources.host import HostSource
    from monitor.sources.nvml import NvmlSource
    from monitor.sources.vllm import VllmSource

    cfg = CONFIGS[name]
    indices = None if cfg["gpus"] is None else list(range(int(cfg["gpus"])))
    sources: list[object] = [
        NvmlSource(gpm=bool(cfg["gpm"]), util_every_s=float(cfg["util_every"]), indices=indices)
    ]
    if cfg["host"]:
        host = HostSource(pids=[workload_pid] if workload_pid else [])
        if cfg.get("old_host"):
            host._schedstat = False
            host.freq_every_s = 0.0
        sources.append(host)
    if cfg["vllm"] and vllm_url:
        sources.append(VllmSource(vllm_url))
    # Each source's own CPU (the thread it is read on), to say where a tick's time goes.
    per_source: dict[str, float] = {}

    def timed(src: object) -> object:
        read = src.read  # type: ignore[attr-defined]

        def read_timed() -> object:
            t = time.thread_time()
            try:
                return read()
            finally:
                key = src.name  # type: ignore[attr-defined]
                per_source[key] = per_source.get(key, 0.0) + time.thread_time() - t

        src.read = read_timed  # type: ignore[attr-defined]
        return src

    sources = [timed(src) for src in sources]
    sampler = Sampler(sources, interval=float(cfg["interval"]), capacity=100_000)
    sampler.tick()  # first tick allocates GPM buffers and warms caches: not counted
    per_source.clear()
    c0, t0 = time.process_time(), time.monotonic()
    sampler.run(duration=float(cfg["seconds"]))
    c1, t1 = time.process_time(), time.monotonic()
    snaps = sampler.snapshots()[1:]
    sampler.close()
    ticks = len(snaps)
    cpu = c1 - c0
    g = snaps[-1].gpus[0] if snaps and snaps[-1].gpus else None
    return {
        "config": name,
        "ticks": ticks,
        "gpus": len(snaps[-1].gpus) if snaps else 0,
        "cpu_s": cpu,
        "cpu_ms_per_tick": 1000 * cpu / max(1, ticks),
        "core_share": cpu / (t1 - t0),
        "median_tick_wall_ms": 1000 * sorted(s.duration_s for s in snaps)[len(snaps) // 2]
        if snaps
        else None,
        "fields_read": sorted(
            k
            for k in (
                "util",
                "sm_active",
                "sm_occupancy",
                "tensor_active",
                "dram_active",
                "fp16_active",
                "fp32_active",
                "power_watts",
                "sm_clock_hz",
                "memory_used_bytes",
                "pcie_tx_bytes_per_s",
                "nvlink_tx_bytes_per_s",
                "temperature_c",
                "throttle_reasons",
            )
            if g is not None and getattr(g, k) is not None
        ),
        "engines": len(snaps[-1].engines) if snaps else 0,
        "source_ms_per_tick": {
            k: round(1000 * v / max(1, ticks), 3) for k, v in per_source.items()
        },
        "threads_read": sum(len(p.threads) for p in snaps[-1].host.processes)
        if snaps and snaps[-1].host is not None
        else None,
    }


def nvitop_beside(seconds: float, interval: float) -> dict[str, object]:
    import psutil

    port = free_port()
    proc = subprocess.Popen(
        [
            "nvitop-exporter",
            "--bind-address",
            "127.0.0.1",
            "--port",
            str(port),
            "--interval",
            str(interval),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(4.0)  # start-up and first collection are not counted
    p = psutil.Process(proc.pid)
    c0 = sum(p.cpu_times()[:2])
    t0 = time.monotonic()
    body = ""
    import urllib.request

    while time.monotonic() - t0 < seconds:
        time.sleep(5.0)
        try:
            body = (
                urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5)
                .read()
                .decode()
            )
        except Exception as exc:
            body = f"scrape failed: {exc}"
    c1 = sum(p.cpu_times()[:2])
    t1 = time.monotonic()
    proc.terminate()
    try:
        _, err = proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    families = sorted(
        {
            line.split("{")[0].split(" ")[0]
            for line in body.splitlines()
            if line and not line.startswith("#")
        }
    )
    ticks = (t1 - t0) / interval
    if len(families) < 2:  # it never served its metrics: say why rather than report 0 CPU
        return {
            "config": f"nvitop-exporter-{interval:g}s",
            "error": f"{body[:300]} | stderr: {(err or '')[-800:]}",
        }
    return {
        "config": f"nvitop-exporter-{interval:g}s",
        "cpu_s": c1 - c0,
        "cpu_ms_per_tick": 1000 * (c1 - c0) / ticks,
        "core_share": (c1 - c0) / (t1 - t0),
        "families": len(families),
        "gpu_families": [f for f in families if "gpu" in f.lower() or "nvml" in f.lower()][:60],
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path)
    ap.add_argument("--one")
    ap.add_argument("--vllm-url")
    ap.add_argument("--pid", type=int)
    ap.add_argument("--configs", help="comma-separated subset of the configurations")
    args = ap.parse_args()
    if args.one:
        print(json.dumps(run_one(args.one, args.vllm_url, args.pid)), flush=True)
        return
    port = free_port()
    srv = fixture_server.start(FIXTURE.read_bytes(), port)
    load = subprocess.Popen(
        [sys.executable, str(ROOT / "bench/gpu/workloads.py"), "matmul", "--seconds", "200"],
        stdout=subprocess.DEVNULL,
    )
    time.sleep(4.0)
    results = []
    for name in args.configs.split(",") if args.configs else CONFIGS:
        cmd = [
            sys.executable,
            __file__,
            "--one",
            name,
            "--vllm-url",
            f"http://127.0.0.1:{port}/metrics",
            "--pid",
            str(load.pid),
        ]
        if name == "agent-all-1s":
            holder: dict[str, object] = {}

            def beside(h: dict[str, object] = holder) -> None:
                h.update(nvitop_beside(18.0, 1.0))

            th = threading.Thread(target=beside)
            th.start()
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
            th.join()
            results.append(holder)
        else:
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        try:
            results.append(json.loads(res.stdout.strip().splitlines()[-1]))
        except Exception:
            results.append({"config": name, "error": (res.stderr or res.stdout)[-1500:]})
        print(json.dumps(results[-1]), flush=True)
    load.terminate()
    srv.shutdown()
    lines = [
        f"# headroom agent cost on a real GPU ({time.strftime('%Y-%m-%d')}), matmul loop running; one GPU",
        f"# host: {os.cpu_count()} CPUs; CPU per tick = process CPU / ticks; core share = CPU / wall",
        f"{'config':<28} {'gpus':>4} {'ticks':>6} {'ms CPU/tick':>12} {'% of a core':>12}  fields",
    ]
    for r in results:
        if "error" in r:
            lines.append(f"{r['config']:<28} ERROR {str(r['error'])[-300:]!r}")
            continue
        fields = r.get("fields_read") or r.get("gpu_families")
        lines.append(
            f"{r['config']:<28} {r.get('gpus', '-')!s:>4} {r.get('ticks', '-')!s:>6} {r['cpu_ms_per_tick']:>12.3f} {100 * r['core_share']:>11.3f}%  {fields}"
        )
        if r.get("source_ms_per_tick"):
            lines.append(f"{'':<28}   per source, ms CPU/tick: {r['source_ms_per_tick']}; "
                         f"engine threads read: {r.get('threads_read')}")  # fmt: skip
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text + "\n" + json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
