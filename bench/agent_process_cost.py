"""What a running agent costs, whole process, side by side with nvitop-exporter.

Every configuration runs at once, each its own process (tree), for the same
``--seconds`` while a busy workload runs: a real vLLM 0.32 /metrics capture is
served on loopback by a process whose tree holds the workload (a bf16 matmul
loop with ``--workload matmul``, a pure-Python loop with ``cpu``), so the agents'
host source finds it from the engine URL's port. Each /metrics is scraped every
5 s with Prometheus's Accept header (so every exporter answers in OpenMetrics). CPU
is utime+stime of each whole process tree over the measured span (start-up
excluded); RSS is the main process's at the end.

    python bench/agent_process_cost.py --seconds 120 --workload matmul --nvitop \\
        --before .before --out bench/results/agent_process_cost_h200.txt

``--before DIR`` adds the same agent configurations run from another checkout (the
code before a change), in the same run. On a box with several GPUs the agent also runs
watching GPU 0 alone (``--gpu 0``), and the report says what each further GPU costs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.machine import tree_cpu  # noqa: E402

FIXTURE = ROOT / "tests" / "fixtures" / "vllm-0.32.0-cpu-metrics-under-load.txt"
# What Prometheus asks for (its default scrape protocols): every exporter here answers in
# OpenMetrics, as it does to a real Prometheus.
PROMETHEUS_ACCEPT = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;"
    "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve(port: int, workload: str, seconds: float, page: str) -> None:
    """The stand-in engine: the capture on ``port``, the workload as a child.

    ``page``: "advancing" (default) grows every counter, bucket and sum each second, as a
    loaded vLLM's page does, so no reader can get by on an unchanged page; "static"
    serves the capture as it is."""
    from bench import fixture_server

    if page == "advancing":
        from bench.agent_fault_soak import Page, PageServer

        server = PageServer(Page(churn=False), time.monotonic())
        server.stop()  # bound to a free port at creation: serve on the one asked for
        server.port = port
        server.start()
    else:
        fixture_server.start(FIXTURE.read_bytes(), port)
    if workload == "matmul":
        cmd = [sys.executable, str(ROOT / "bench/gpu/workloads.py"), "matmul", "--seconds",
               str(seconds)]  # fmt: skip
    elif workload == "cpu":
        cmd = [
            sys.executable,
            "-c",
            f"import time\nt=time.time()\nwhile time.time()-t<{seconds}: pass",
        ]
    else:
        cmd = [sys.executable, "-c", f"import time; time.sleep({seconds})"]
    child = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    child.wait()


def bare_nvml(interval: float, port: int) -> None:
    """NVML + GPM read by headroom's source alone in a sleep loop: no sampler, window,
    diagnosis or HTTP server (its /metrics port is only a heartbeat for the harness)."""
    from bench import fixture_server
    from monitor.sources.nvml import NvmlSource

    fixture_server.start(b"# bare loop\n", port)
    src = NvmlSource(gpm=True)
    deadline = time.monotonic()
    while True:
        src.read()
        deadline += interval
        time.sleep(max(0.0, deadline - time.monotonic()))


def gpu_count() -> int:
    """The GPUs nvidia-smi lists (0 without a driver)."""
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))


def ticks_of(port: int) -> float | None:
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
    except Exception:
        return None
    for line in body.decode().splitlines():
        if line.startswith("headroom_agent_ticks_total "):
            return float(line.split()[1])
    return None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=120.0)
    ap.add_argument("--warmup", type=float, default=10.0)
    ap.add_argument("--workload", choices=("matmul", "cpu", "none"), default="cpu")
    ap.add_argument("--nvitop", action="store_true", help="run nvitop-exporter beside")
    ap.add_argument("--nvitop-path", help="where nvitop-exporter is installed (pip --target)")
    ap.add_argument("--no-nvml", action="store_true", help="no GPU here: agents without NVML")
    ap.add_argument("--before", type=Path, help="a checkout of the code before the change")
    ap.add_argument("--configs", help="comma-separated subset")
    ap.add_argument(
        "--page",
        choices=("advancing", "static"),
        default="advancing",
        help="the engine page: counters growing each second (default) or the capture as is",
    )
    ap.add_argument("--out", type=Path)
    ap.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--bare-nvml", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve(args.serve, args.workload, args.seconds + args.warmup + 60, args.page)
        return
    if args.bare_nvml:
        bare_nvml(1.0, args.bare_nvml)
        return

    engine_port = free_port()
    url = f"http://127.0.0.1:{engine_port}/metrics"
    server = subprocess.Popen(
        [
            sys.executable,
            __file__,
            "--serve",
            str(engine_port),
            "--workload",
            args.workload,
            "--seconds",
            str(args.seconds),
            "--warmup",
            str(args.warmup),
            "--page",
            args.page,
        ]  # fmt: skip
    )
    gpu = [] if not args.no_nvml else ["--no-nvml"]
    agent = ["-m", "headroom", "agent", *gpu]
    configs: dict[str, tuple[list[str], Path]] = {
        "agent --interval 1": ([*agent, "--vllm", url, "--interval", "1"], ROOT),
        "agent --interval 1 --no-host": ([*agent, "--vllm", url, "--no-host"], ROOT),
        "agent --interval 1 --no-host, no vLLM": ([*agent, "--no-host"], ROOT),
        # Judging every tick, as the agent did by default before judging once a step and
        # for each read.
        "agent --interval 1 --diagnose-every 1": (
            [*agent, "--vllm", url, "--diagnose-every", "1"],
            ROOT,
        ),
        "agent --interval 0.1": ([*agent, "--vllm", url, "--interval", "0.1"], ROOT),
        "agent --interval 0.1 --window 120": (
            [*agent, "--vllm", url, "--interval", "0.1", "--window", "120"],
            ROOT,
        ),
    }
    envs: dict[str, dict[str, str]] = {}
    gpus = 0 if args.no_nvml else gpu_count()
    if gpus >= 2:
        # Each further GPU's cost: the same agent on one GPU and on every GPU, side by side.
        configs["agent --interval 1 --no-host, no vLLM, --gpu 0"] = (
            [*agent, "--no-host", "--gpu", "0"],
            ROOT,
        )
    # The NVML energy counter (read every 30 s by default) against the same agent with it
    # off, side by side; "(again)" rows run the same configuration twice, so the difference
    # can be read against the spread between two identical agents.
    energy_off = {"HEADROOM_GPU_ENERGY_EVERY": "0"}
    if not args.no_nvml:
        for name in ("agent --interval 1", "agent --interval 0.1"):
            argv, cwd = configs[name]
            configs[f"{name}, energy off"] = (argv, cwd)
            envs[f"{name}, energy off"] = energy_off
        for name in ("agent --interval 1", "agent --interval 1, energy off"):
            configs[f"{name} (again)"] = configs[name]
            envs[f"{name} (again)"] = envs.get(name, {})
    if args.before is not None:
        for name in ("agent --interval 1", "agent --interval 0.1"):
            argv, _ = configs[name]
            configs[f"BEFORE {name}"] = (argv, args.before.resolve())
    if args.configs:
        wanted = set(args.configs.split(","))
        configs = {k: v for k, v in configs.items() if k in wanted}
    procs: dict[str, tuple[subprocess.Popen[bytes], int]] = {}
    time.sleep(2.0)
    for name, (argv, cwd) in configs.items():
        port = free_port()
        # This checkout (or the one before) first, then what the path held (wheels).
        path = os.pathsep.join([str(cwd), os.environ.get("PYTHONPATH", "")])
        env = {**os.environ, **envs.get(name, {}), "PYTHONPATH": path}
        procs[name] = (
            subprocess.Popen(
                [sys.executable, *argv, "--listen", f"127.0.0.1:{port}"],
                cwd=cwd,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            ),
            port,
        )
    if not args.no_nvml:
        port = free_port()
        procs["NvmlSource + GPM alone, 1 s loop"] = (
            subprocess.Popen([sys.executable, __file__, "--bare-nvml", str(port)]),
            port,
        )
    if args.nvitop and (args.nvitop_path or shutil.which("nvitop-exporter")):
        port = free_port()
        exporter = ["nvitop-exporter"]
        nv_env = dict(os.environ)
        if args.nvitop_path:
            exporter = [sys.executable, "-m", "nvitop_exporter"]
            nv_env["PYTHONPATH"] = args.nvitop_path
        argv = [*exporter, "--bind-address", "127.0.0.1", "--port", str(port), "--interval", "1"]
        procs["nvitop-exporter --interval 1"] = (
            subprocess.Popen(
                argv, env=nv_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            ),
            port,
        )
    time.sleep(args.warmup)
    ps = {name: psutil.Process(p.pid) for name, (p, _) in procs.items()}
    c0 = {name: tree_cpu(p) for name, p in ps.items()}
    k0 = {name: ticks_of(port) for name, (_, port) in procs.items()}
    t0 = time.monotonic()
    scrapes_failed: dict[str, int] = {name: 0 for name in procs}
    while time.monotonic() - t0 < args.seconds:
        time.sleep(min(5.0, max(0.0, args.seconds - (time.monotonic() - t0))))
        for name, (_, port) in procs.items():
            try:
                request = urllib.request.Request(
                    f"http://127.0.0.1:{port}/metrics", headers={"Accept": PROMETHEUS_ACCEPT}
                )
                urllib.request.urlopen(request, timeout=5).read()
            except Exception:
                scrapes_failed[name] += 1
    elapsed = time.monotonic() - t0
    c1 = {name: tree_cpu(p) for name, p in ps.items()}
    k1 = {name: ticks_of(port) for name, (_, port) in procs.items()}
    rss = {name: p.memory_info().rss / 2**20 for name, p in ps.items()}
    rows = []
    for name in procs:
        cpu = c1[name] - c0[name]
        ticks = (k1[name] - k0[name]) if k1[name] is not None and k0[name] is not None else None
        rows.append(
            {
                "config": name,
                "core_share": cpu / elapsed,
                "cpu_s": cpu,
                "ticks": ticks,
                "ms_per_tick": 1000 * cpu / ticks if ticks else None,
                "rss_mib": rss[name],
                "scrapes_failed": scrapes_failed[name],
            }
        )
    for p, _ in procs.values():
        p.terminate()
    for p, _ in procs.values():
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
    for q in psutil.Process(server.pid).children(recursive=True):
        q.terminate()
    server.terminate()
    nvitop = next((r["core_share"] for r in rows if r["config"].startswith("nvitop")), None)
    head = [
        f"# agent process cost, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"{platform.node()}: {os.cpu_count()} CPUs, python {platform.python_version()}",
        f"# command: {' '.join([Path(sys.executable).name, *sys.argv])}",
        f"# all configurations side by side for {elapsed:.0f} s after {args.warmup:g} s of "
        f"start-up; workload: {args.workload}; engine page: {args.page}; each /metrics scraped "
        "every 5 s as Prometheus asks (OpenMetrics)",
        "# CPU: utime+stime of the whole process tree; RSS: the main process at the end",
        f"{'configuration':<42} {'% of a core':>11} {'ms/tick':>8} {'ticks':>6} "
        f"{'RSS MiB':>8} {'x nvitop':>8}",
    ]
    for r in rows:
        ratio = f"{r['core_share'] / nvitop:.2f}" if nvitop else "-"
        mspt = f"{r['ms_per_tick']:.2f}" if r["ms_per_tick"] else "-"
        head.append(
            f"{r['config']:<42} {100 * r['core_share']:>10.3f}% {mspt:>8} "
            f"{r['ticks'] if r['ticks'] is not None else '-'!s:>6} {r['rss_mib']:>8.1f} {ratio:>8}"
        )
    by = {r["config"]: r["core_share"] for r in rows}
    one = by.get("agent --interval 1 --no-host, no vLLM, --gpu 0")
    every = by.get("agent --interval 1 --no-host, no vLLM")
    if gpus >= 2 and one is not None and every is not None:
        head.append(
            f"each further GPU: {100 * (every - one) / (gpus - 1):+.3f}% of a core "
            f"({gpus} GPUs against GPU 0 alone)"
        )
    text = "\n".join(head) + "\n"
    print(text, flush=True)
    if args.out:
        args.out.write_text(text + "\n" + json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
