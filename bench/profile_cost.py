"""What a py-spy profile costs a real vLLM (CPU build) under load, and what it costs headroom.

Run from the repository root:  .venv/bin/python bench/profile_cost.py [--pairs 6 --seconds 10]

Method (MACHINE.md): one vLLM CPU server (tiny model, --max-num-seqs 4) under a closed
loop of 4 streams of 300 tokens, so the engine steps back to back. Windows of --seconds
alternate, in pairs whose order flips each time: one with nothing else running, one with
``py-spy record --nonblocking`` at headroom's default rate (50/s) on the server's process
tree, as ``snapshot --profile`` runs it. Throughput is vLLM's own count of generated
tokens over each window (``vllm:generation_tokens_total``), so the load generator's
pace does not enter. A stall probe (5 ms sleeps, gaps over 50 ms logged) runs beside; a
pair that lost over 200 ms to stalls in either window is left out when clean pairs remain.
Quoted: the median of the per-pair ratios (with / without) and the median tok/s of each.
headroom's own CPU for a profile is py-spy's (user + system of the child, from
getrusage) per second profiled.
"""

from __future__ import annotations

import argparse
import datetime as dt
import resource
import statistics
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "vllm"))

from vllm_load import Load  # noqa: E402
from vllm_support import serve  # noqa: E402

from bench import machine  # noqa: E402
from loadgen.stall import StallProbe  # noqa: E402
from monitor.profiling import pyspy  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "profile_cost.txt"
STALL_S = 0.2


def generated(url: str) -> float:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as resp:
        for line in resp.read().decode().splitlines():
            if line.startswith("vllm:generation_tokens_total{"):
                return float(line.rsplit(" ", 1)[1])
    raise RuntimeError("no vllm:generation_tokens_total")


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def window(
    url: str,
    seconds: float,
    root_pid: int | None,
    tree: bool = True,
    nice: bool = True,
    rate: int = pyspy.DEFAULT_RATE,
) -> tuple[float, float, int]:
    """(tok/s, py-spy CPU seconds, samples) over one window; profiled when root_pid is given."""
    cpu0 = children_cpu()
    tok0, t0 = generated(url), time.monotonic()
    samples = 0
    if root_pid is not None:
        rec = pyspy.start(root_pid, seconds, rate, subprocesses=tree, niceness=nice)
        raw = rec.finish()
        samples = sum(s.count for s in pyspy.parse(raw)) if raw else 0
    else:
        time.sleep(seconds)
    tok1, t1 = generated(url), time.monotonic()
    return (tok1 - tok0) / (t1 - t0), children_cpu() - cpu0, samples


def busiest_process(root: int) -> int:
    """The process of the tree that burns the most CPU over a second (vLLM's worker, here)."""
    import psutil

    procs = [psutil.Process(root), *psutil.Process(root).children(recursive=True)]
    before = {p.pid: sum(p.cpu_times()[:2]) for p in procs}
    time.sleep(1.0)
    return max(procs, key=lambda p: sum(p.cpu_times()[:2]) - before[p.pid]).pid


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=6)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument(
        "--hot-process", action="store_true",
        help="profile only the busiest engine process (as watch/agent do), not the whole tree",
    )  # fmt: skip
    ap.add_argument("--no-nice", action="store_true", help="py-spy at normal priority")
    ap.add_argument("--rate", type=int, default=pyspy.DEFAULT_RATE, help="py-spy samples/s")
    args = ap.parse_args()
    python = serve.ensure_venv()
    model = serve.ensure_model(python)
    rows = []
    with serve.VllmServer(extra_args=["--max-num-seqs", "4"], python=python, model_dir=model,
                          startup_timeout=420) as server, StallProbe() as probe:  # fmt: skip
        root = server.pid
        with Load(server.url, concurrency=4, max_tokens=300) as load:
            time.sleep(5)  # past the first requests' prefill and compile
            if args.hot_process:
                root = busiest_process(root)
            for i in range(args.pairs):
                order = (None, root) if i % 2 == 0 else (root, None)
                pair = {}
                for target in order:
                    s0 = time.monotonic()
                    tok_s, cpu_s, samples = window(
                        server.url,
                        args.seconds,
                        None if target is None else root,
                        tree=not args.hot_process,
                        nice=not args.no_nice,
                        rate=args.rate,
                    )
                    n, worst = probe.stalls(s0, time.monotonic())
                    pair["on" if target else "off"] = (tok_s, cpu_s, samples, n, worst)
                rows.append(pair)
                print(f"pair {i}: {pair}", flush=True)
        errors = list(load.stats.errors)
    clean = [p for p in rows if max(p["on"][4], p["off"][4]) < STALL_S] or rows
    ratios = [p["on"][0] / p["off"][0] for p in clean if p["off"][0] > 0]
    off = statistics.median(p["off"][0] for p in clean)
    on = statistics.median(p["on"][0] for p in clean)
    cpu_per_s = statistics.median(p["on"][1] / args.seconds for p in clean)
    samples = statistics.median(p["on"][2] for p in clean)
    lines = [
        "py-spy profile cost on a real vLLM (CPU build) under load, and headroom's own CPU for it",
        f"date: {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC",
        f"machine: {machine.describe()}",
        f"method: {args.pairs} pairs of {args.seconds:g} s windows, order flipped each pair; "
        f"py-spy record --nonblocking --rate {args.rate} "
        + (
            "on the busiest engine process only (as watch/agent)"
            if args.hot_process
            else "--subprocesses on the server's process tree (as snapshot --profile)"
        )
        + (", at normal priority" if args.no_nice else ", at nice 19 (headroom's default)")
        + "; tok/s from vllm:generation_tokens_total; "
        f"pairs that lost over {STALL_S * 1000:.0f} ms to stalls left out ({len(clean)}/{len(rows)} kept)",
        f"load: 4 closed-loop streams of 300 tokens, --max-num-seqs 4; client errors: {len(errors)}",
        "",
        f"output tok/s without profiling (median)   {off:8.1f}",
        f"output tok/s while profiling (median)     {on:8.1f}",
        f"ratio with/without, median of pairs       {statistics.median(ratios):8.3f}  "
        f"(per pair: {', '.join(f'{r:.3f}' for r in ratios)})",
        f"py-spy CPU per second profiled (median)   {cpu_per_s * 1000:8.1f} ms  "
        f"({100 * cpu_per_s:.1f}% of a core)",
        f"samples per profile (median)              {samples:8.0f}",
        "",
        "per pair (tok/s off, on; py-spy CPU s; stalls off/on, seconds lost):",
    ]
    for p in rows:
        lines.append(
            f"  {p['off'][0]:7.1f} {p['on'][0]:7.1f}  {p['on'][1]:.3f}  "
            f"{p['off'][3]}/{p['on'][3]}  {max(p['off'][4], p['on'][4]):.2f}"
        )
    machine.write_results(args.out, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
