"""`headroom fleet --json` over a large fleet: 500 hosts x 8 GPUs backfilled into a real Prometheus.

Run from the repository root:  .venv/bin/python bench/fleet_scale.py [--hosts 500] [--runs 7]

1. Writes OpenMetrics for HOSTS hosts x GPUS GPUs, one engine per GPU, with the families an
   agent exports that the fleet reads (GPU duty cycle and SM active, engine R/Q/KV and
   headroom, verdict confidences, last tick) plus those it does not read but a real TSDB
   holds beside them (other GPU gauges, headroom_diagnosis 0/1 for every cause of every
   scope), five samples 15 s apart per series.
2. `promtool tsdb create-blocks-from openmetrics` turns it into blocks in a temp dir.
3. A real `prometheus` on 127.0.0.1 serves that TSDB (scraping nothing).
4. Times `python -m headroom fleet --prometheus URL --json --at T` end to end (a new
   process each run: interpreter start, imports, the queries, JSON out), T the last
   backfilled sample (backfilled blocks answer only at their own timestamps), and checks
   every run saw every host and GPU. Target: under 2 s for 4,000 GPUs.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # proc_support, which prometheus_support uses
sys.path.insert(0, str(ROOT / "tests" / "agent"))

from prometheus_support import PROMTOOL, run_prometheus  # noqa: E402

from bench import machine  # noqa: E402
from monitor.diagnosis.verdict import CAUSES  # noqa: E402

SAMPLES = 5
STEP_S = 15
GPU_FAMILIES = (
    "headroom_gpu_utilization_ratio",
    "headroom_gpu_sm_active_ratio",
    "headroom_gpu_tensor_active_ratio",
    "headroom_gpu_dram_active_ratio",
    "headroom_gpu_power_watts",
    "headroom_gpu_memory_used_bytes",
)
ENGINE_FAMILIES = (
    "headroom_engine_requests_running",
    "headroom_engine_requests_waiting",
    "headroom_engine_kv_cache_usage_ratio",
    "headroom_engine_load_headroom_ratio",
    "headroom_engine_generation_tokens_per_second",
)
HOST_CAUSES = ("starved", "seq-cap", "kv-cap", "cpu-bound", "compute-bound", "idle")


def _labels(d: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in d.items()) + "}"


def openmetrics(hosts: int, gpus: int, t_end: int, seed: int = 15) -> Iterator[str]:
    rng = random.Random(seed)
    stamps = [t_end - STEP_S * (SAMPLES - 1 - i) for i in range(SAMPLES)]
    boxes = []
    for h in range(hosts):
        inst = f"gpu-{h:04d}.example:9402"
        busy = rng.random()
        engines = [
            {
                "url": f"http://127.0.0.1:{8000 + e}/metrics",
                "model_name": "llama-3.1-70b",
                "engine": "0",
            }  # fmt: skip
            for e in range(gpus)
        ]
        boxes.append((inst, busy, HOST_CAUSES[h % len(HOST_CAUSES)], engines))

    def family(name: str, rows: Iterator[tuple[dict[str, str], float]]) -> Iterator[str]:
        yield f"# TYPE {name} gauge\n"
        for labels, value in rows:
            text = _labels({"job": "headroom", **labels})
            for t in stamps:
                yield f"{name}{text} {value:.6g} {t}\n"

    for name in GPU_FAMILIES:
        yield from family(name, (
            ({"instance": inst, "gpu": str(g), "uuid": f"GPU-{inst}-{g}", "model": "NVIDIA H200",
              "source": "nvml"}, min(1.0, busy * (0.9 + 0.02 * g)))
            for inst, busy, _, _ in boxes for g in range(gpus)
        ))  # fmt: skip
    for name in ENGINE_FAMILIES:
        yield from family(name, (
            ({"instance": inst, **e}, busy * 64)
            for inst, busy, _, engines in boxes for e in engines
        ))  # fmt: skip

    def scopes(engines: list[dict[str, str]]) -> list[str]:
        return ["box"] + [f"gpu:{g}" for g in range(gpus)] + [
            f"engine:{e['model_name']}/{e['engine']}@{e['url']}" for e in engines
        ]  # fmt: skip

    yield from family("headroom_diagnosis", (
        ({"instance": inst, "cause": c, "scope": s}, 1.0 if (c, s) == (cause, "box") else 0.0)
        for inst, _, cause, engines in boxes for s in scopes(engines) for c in CAUSES
    ))  # fmt: skip
    yield from family("headroom_diagnosis_confidence", (
        ({"instance": inst, "cause": cause, "scope": s}, 0.9)
        for inst, _, cause, engines in boxes for s in scopes(engines)[:1] + scopes(engines)[-2:]
    ))  # fmt: skip
    yield "# TYPE headroom_agent_last_tick_timestamp_seconds gauge\n"
    for inst, _, _, _ in boxes:
        text = _labels({"job": "headroom", "instance": inst})
        for t in stamps:
            yield f"headroom_agent_last_tick_timestamp_seconds{text} {t - 0.4} {t}\n"
    yield "# EOF\n"


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def prometheus_cpu(url: str) -> float:
    """Prometheus's own CPU seconds so far, from its /metrics."""
    import httpx

    for line in httpx.get(url + "/metrics", timeout=10).text.splitlines():
        if line.startswith("process_cpu_seconds_total "):
            return float(line.split()[1])
    return float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=500)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--out", type=Path, help="also write the result text here")
    args = ap.parse_args()

    # Within the last few hours, well inside the default retention, clear of the head block.
    t_end = int(time.time()) // 60 * 60 - 3600
    lines: list[str] = []

    def say(text: str = "") -> None:
        print(text, flush=True)
        lines.append(text)

    with tempfile.TemporaryDirectory(prefix="headroom-fleet-bench-") as tmp_name:
        tmp = Path(tmp_name)
        om = tmp / "fleet.om"
        t0 = time.perf_counter()
        series = 0
        with om.open("w") as f:
            for line in openmetrics(args.hosts, args.gpus, t_end):
                f.write(line)
                series += not line.startswith("#")
        gen_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        subprocess.run([PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", "-q",
                        str(om), str(tmp / "data")], check=True)  # fmt: skip
        backfill_s = time.perf_counter() - t0
        size_mb = om.stat().st_size / 1e6
        om.unlink()
        config = {"global": {"scrape_interval": "15s"}, "scrape_configs": []}
        with run_prometheus(config, tmp / "prom", data=tmp / "data") as url:
            cmd = [sys.executable, "-m", "headroom", "fleet", "--prometheus", url, "--json",
                   "--at", str(t_end)]  # fmt: skip
            walls, sizes, cpus, prom_cpus = [], [], [], []
            load_start = os.getloadavg()[0]
            for i in range(args.runs + 1):
                prom0 = prometheus_cpu(url)
                child0 = _children_cpu()
                t0 = time.perf_counter()
                run = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=120)
                wall = time.perf_counter() - t0
                cpu = _children_cpu() - child0
                prom = prometheus_cpu(url) - prom0
                if run.returncode != 0:
                    raise SystemExit(f"fleet failed: {run.stderr.strip()}")
                doc = json.loads(run.stdout)
                gpus = sum(len(h["gpus"]) for h in doc["hosts"])
                engines = sum(len(h["engines"]) for h in doc["hosts"])
                assert len(doc["hosts"]) == args.hosts and gpus == args.hosts * args.gpus
                assert not any(h["stale"] for h in doc["hosts"])
                if i:  # the first run warms Prometheus's page cache; it is reported apart
                    walls.append(wall)
                    sizes.append(len(run.stdout))
                    cpus.append(cpu)
                    prom_cpus.append(prom)
                else:
                    first = wall
            # The interpreter's own start-up and imports, for scale: `headroom --help`.
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "headroom", "fleet", "--help"],
                           capture_output=True, cwd=ROOT, check=True)  # fmt: skip
            help_s = time.perf_counter() - t0
        load = os.getloadavg()[0]

    say("headroom fleet --json over a backfilled Prometheus (bench/fleet_scale.py)")
    say(f"date: {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC")
    say(
        f"machine: {machine.describe()}, load average {load_start:.1f} before the runs, "
        f"{load:.1f} at the end (shared with other work: wall times include waiting for a core)"
    )
    say(
        f"prometheus: {subprocess.run([PROMTOOL, '--version'], capture_output=True, text=True).stdout.splitlines()[0]}"
    )
    say(f"fleet: {args.hosts} hosts x {args.gpus} GPUs = {args.hosts * args.gpus} GPUs, "
        f"{engines} engines; {series // SAMPLES} series, {SAMPLES} samples each {STEP_S} s apart; "
        f"OpenMetrics {size_mb:.0f} MB written in {gen_s:.1f} s, backfilled in {backfill_s:.1f} s")  # fmt: skip
    say(
        f"runs: {args.runs} timed after one warm-up ({first:.2f} s); each a new process: "
        "python -m headroom fleet --prometheus URL --json --at T"
    )
    say(
        f"wall s: median {statistics.median(walls):.2f}, max {max(walls):.2f}, "
        f"min {min(walls):.2f}  (target < 2 s: {'met' if max(walls) < 2 else 'NOT met'})"
    )
    say(f"all runs: {' '.join(f'{w:.2f}' for w in walls)}")
    say(
        f"CPU s per run, median: headroom fleet process {statistics.median(cpus):.2f} "
        f"(user+sys), Prometheus answering its queries {statistics.median(prom_cpus):.2f} "
        "(process_cpu_seconds_total before and after); on an idle machine wall is about "
        "the larger of the two plus the round trips"
    )
    say(
        f"JSON out: {statistics.median(sizes) / 1e6:.1f} MB; "
        f"`headroom fleet --help` alone (interpreter + imports): {help_s:.2f} s"
    )
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
