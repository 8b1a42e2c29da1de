"""The fleet's spare capacity against what sweeps then measure (run by hand; results committed).

Two simulated boxes with different sequence caps, each serving its own steady open-loop load
and watched by its own `headroom agent` process, scraped by one real Prometheus. `headroom
fleet --json` gives each host's spare capacity (rate at its first limit less today's rate,
through PromQL). Then each box's config is swept (a twin of the box with no load of its own,
the same request shape, closed loop around its cap): the rate at the knee less the rate the
box was serving is the spare capacity measured. Goal: within 25% per host and in total.

    .venv/bin/python bench/fleet_spare_capacity.py [--out bench/results/fleet_spare_capacity_sim.txt]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # proc_support, which prometheus_support uses
sys.path.insert(0, str(ROOT / "tests" / "agent"))

from prometheus_support import free_port, run_prometheus  # noqa: E402

from simulator import start_sim  # noqa: E402

PROMPT, OUTPUT = 128, 64
# (name, max_num_seqs, the box's own request rate, the sweep's concurrency levels)
BOXES = (
    ("cap6", 6, 4.0, "2,4,6,8,12"),
    ("cap12", 12, 8.0, "4,8,12,16,24"),
)


def box_config(cap: int, rate: float) -> dict:
    return {
        "engine": {"max_num_seqs": cap},
        "load": {"mode": "open", "rate": rate, "prompt_tokens": PROMPT, "prompt_jitter": 0.0,
                 "output_tokens": OUTPUT, "output_jitter": 0.0, "initial_requests": 0},
    }  # fmt: skip


def headroom(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "headroom", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "bench/results/fleet_spare_capacity_sim.txt"))
    ap.add_argument("--settle", type=float, default=30.0, help="seconds before reading")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="spare-"))
    sims, agents, hosts = [], [], {}
    try:
        for name, cap, rate, _ in BOXES:
            sim = start_sim(scenario="starved", port=0, config=box_config(cap, rate))
            sims.append(sim)
            port = free_port()
            agents.append(subprocess.Popen(
                [sys.executable, "-m", "headroom", "agent", "--listen", f"127.0.0.1:{port}",
                 "--vllm", sim.url, "--dcgm-exporter", sim.gpu_metrics_url, "--no-nvml",
                 "--interval", "0.5", "--window", "20"],
                cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))  # fmt: skip
            hosts[f"127.0.0.1:{port}"] = name
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "scrape_configs": [{"job_name": "headroom",
                                "static_configs": [{"targets": list(hosts)}]}],
        }  # fmt: skip
        with run_prometheus(config, tmp / "prom") as prom:
            time.sleep(args.settle)
            fleet = json.loads(headroom("fleet", "--prometheus", prom, "--json").stdout)
            own = {}
            for hp, name in hosts.items():
                snap = httpx.get(f"http://{hp}/api/v1/snapshot", timeout=10).json()
                e = snap["engines"][0]
                own[name] = (e["headroom"]["rate_at_limit_rps"], e["requests_per_s"],
                             e["headroom"]["limit"])  # fmt: skip
        by_name = {hosts[h["instance"]]: h for h in fleet["hosts"]}
        rows = []
        for name, cap, rate, levels in BOXES:
            twin = start_sim(scenario="starved", port=0, load=False, config=box_config(cap, rate))
            out = tmp / f"sweep-{name}"
            try:
                run = headroom("sweep", "--target", twin.url, "--concurrency", levels,
                               "--step-seconds", "6", "--warmup-seconds", "2",
                               "--input-tokens", str(PROMPT), "--output-tokens", str(OUTPUT),
                               "--out", str(out), "--quiet")  # fmt: skip
            finally:
                twin.stop()
            assert run.returncode == 0, run.stderr
            sweep = json.loads((out / "sweep.json").read_text())
            sat = sweep["saturation"]
            knee_rps = sat["requests_per_s"]
            lightest = min(sweep["steps"], key=lambda st: st["concurrency"])
            at_limit, now_rps, limit = own[name]
            measured = knee_rps - now_rps
            fleet_spare = by_name[name]["spare_rps"]
            rows.append((name, cap, rate, now_rps, at_limit, limit, fleet_spare,
                         sat["concurrency"], sat["cause"], knee_rps, measured,
                         lightest["e2e_p50_s"], cap / knee_rps, cap / at_limit))  # fmt: skip
    finally:
        for a in agents:
            a.kill()
            a.wait()
        for s in sims:
            s.stop()
    lines = [
        f"# bench/fleet_spare_capacity.py  {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}",
        f"# two simulated boxes (llama-3.1-8b on H100, {PROMPT}-token prompts, {OUTPUT}-token "
        "answers, open-loop Poisson load), each with its own `headroom agent` (window 20 s),",
        "# one Prometheus scraping both every 1 s; `headroom fleet --json` read after "
        f"{args.settle:.0f} s. Measured: a sweep of a twin box with no load of its own,",
        "# closed loop around the cap, 6 s steps: the req/s at the saturation point less the "
        "rate the box was serving (its agent's requests_per_s).",
        "",
        f"{'box':<6} {'cap':>4} {'load':>5} {'serving':>8} {'at limit':>9} {'limit':<8} "
        f"{'fleet spare':>11} {'knee c':>6} {'cause':<8} {'knee rps':>8} {'measured':>8} "
        f"{'fleet/measured':>14}",
    ]
    for r in rows:
        name, cap, rate, now_rps, at_limit, limit, spare, kc, cause, knee, meas = r[:11]
        ratio = spare / meas if spare is not None and meas else None
        lines.append(
            f"{name:<6} {cap:>4} {rate:>5.1f} {now_rps:>8.2f} {at_limit:>9.2f} {limit:<8} "
            f"{spare if spare is None else f'{spare:.2f}':>11} {kc:>6} {cause or '-':<8} "
            f"{knee:>8.2f} {meas:>8.2f} {ratio if ratio is None else f'{ratio:.2f}':>14}"
        )
    lines.append("")
    lines.append(
        "request time (e2e, s): the sweep's lightest step's p50, at the knee (cap / knee "
        "req/s), and what the rate at the limit assumes (cap / rate at limit)"
    )
    for r in rows:
        lines.append(f"{r[0]:<6} lightest {r[11]:.3f}  knee {r[12]:.3f}  assumed {r[13]:.3f}")
    lines.append(f"load average while it ran: {os.getloadavg()[0]:.1f} (2 cores)")
    total_fleet = fleet.get("spare_rps")
    total_meas = sum(r[10] for r in rows)
    lines.append(
        f"total: fleet spare {total_fleet:.2f} req/s, measured {total_meas:.2f} req/s, "
        f"fleet/measured {total_fleet / total_meas:.2f} (goal 0.75-1.25)"
    )
    text = "\n".join(lines) + "\n"
    print(text)
    Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
