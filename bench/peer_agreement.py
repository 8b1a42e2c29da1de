"""headroom sweep against `vllm bench serve` on one real vLLM (CPU build), same dataset and concurrency.

One vLLM server (deploy/vllm-cpu, the tiny random Llama, --max-num-seqs 4, --max-model-len
1024) serves both clients in turn, at each concurrency: headroom's sweep (one step: warm-up,
then a hold of HOLD_S) and vLLM's own benchmark client (`python -m vllm.benchmarks.serve`,
the `vllm bench serve` of vllm-cpu 0.32.0) on the same ShareGPT file
(datasets/chat-longtail.jsonl, as a JSON array for vLLM's loader), both with ignore_eos, so
every request generates its reply's token length. Each client's CPU is its process tree's
(getrusage of the waited children); a stall probe runs beside them.

vLLM's figure covers its whole run, ramp-up and tail included; from its saved per-request
timelines (start, TTFT, inter-token gaps) this script also counts its tokens inside a
steady window (from WARM_S after its start to its last request's start, when the closed
loop begins to drain), the way headroom counts its hold, to tell a disagreement of clients
from a disagreement of windows.

Run: python bench/peer_agreement.py   (about 8 minutes; writes bench/results/peer_agreement.txt)
"""

from __future__ import annotations

import importlib.util
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.machine import describe  # noqa: E402
from loadgen.stall import StallProbe  # noqa: E402

DATASET = ROOT / "datasets" / "chat-longtail.jsonl"
OUT = ROOT / "bench" / "results" / "peer_agreement.txt"
CONCURRENCY = (2, 8)
WARM_S, HOLD_S = 10.0, 40.0
VLLM_MAIN = (
    "import sys; from vllm.utils.argparse_utils import FlexibleArgumentParser; "
    "from vllm.benchmarks.serve import add_cli_args, main; "
    "p = FlexibleArgumentParser(); add_cli_args(p); main(p.parse_args(sys.argv[1:]))"
)


def _serve_module():
    spec = importlib.util.spec_from_file_location(
        "serve", ROOT / "deploy" / "vllm-cpu" / "serve.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _fitting(url: str, rows: list[dict], context: int = 1024) -> list[dict]:
    import httpx

    def count(text: str) -> int:
        r = httpx.post(url + "/tokenize", json={"model": "tiny-llama", "prompt": text}, timeout=30)
        return int(r.json()["count"])

    return [r for r in rows
            if count(r["conversations"][0]["value"]) + count(r["conversations"][1]["value"])
            <= context]  # fmt: skip


def run_headroom(url: str, conc: int, tmp: Path, dataset: Path) -> dict:
    out = tmp / f"hr-{conc}"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-m", "headroom", "sweep", "--target", url, "--dataset", str(dataset),
           "--dataset-prompts", "200", "--concurrency", str(conc), "--step-seconds", str(HOLD_S),
           "--warmup-seconds", str(WARM_S), "--quiet", "--out", str(out)]  # fmt: skip
    cpu0, t0 = _children_cpu(), time.monotonic()
    subprocess.run(cmd, check=True, env=env, cwd=ROOT)
    wall, cpu = time.monotonic() - t0, _children_cpu() - cpu0
    step = json.loads((out / "sweep.json").read_text())["steps"][-1]
    return {
        "tok_s": step["output_tokens_per_s"],
        "ttft_p50": step["ttft_p50_s"],
        "window_s": step["duration_s"],
        "requests": step["requests_completed"],
        "errors": step["requests_failed"],
        "cpu_cores": cpu / wall,
        "locust_cpu": step["client_cpu_ratio"],
        "served_in": step["served_prompt_tokens_mean"],
        "served_out": step["served_completion_tokens_mean"],
    }


def run_vllm(url: str, model_dir: Path, python: Path, conc: int, tmp: Path, sharegpt: Path) -> dict:
    # Enough requests for a run of about WARM_S + HOLD_S at this box's pace (measured: ~2.8
    # req/s at 2 streams, ~5.5 at 8, with the dataset's mean reply of ~320 tokens).
    prompts = {2: 150, 8: 300}.get(conc, 40 * conc)
    env = dict(os.environ, PYTHONUNBUFFERED="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1")  # fmt: skip
    cmd = [str(python), "-c", VLLM_MAIN, "--backend", "openai", "--base-url", url,
           "--endpoint", "/v1/completions", "--model", "tiny-llama", "--tokenizer", str(model_dir),
           "--dataset-name", "sharegpt", "--dataset-path", str(sharegpt), "--ignore-eos",
           "--num-prompts", str(prompts), "--max-concurrency", str(conc), "--request-rate", "inf",
           "--disable-tqdm", "--save-result", "--save-detailed", "--result-dir", str(tmp),
           "--result-filename", f"vllm-{conc}.json", "--seed", "0"]  # fmt: skip
    cpu0, t0 = _children_cpu(), time.monotonic()
    subprocess.run(cmd, check=True, env=env, cwd=tmp, stdout=subprocess.DEVNULL)
    wall, cpu = time.monotonic() - t0, _children_cpu() - cpu0
    r = json.loads((tmp / f"vllm-{conc}.json").read_text())
    starts = r["start_times"]
    t_first = min(starts)
    lo, hi = t_first + WARM_S, max(starts)
    tokens = 0.0
    for s, ttft, itls, n in zip(starts, r["ttfts"], r["itls"], r["output_lens"]):
        if not ttft:
            continue
        # Token times from its own stamps; weight each event by the tokens it carried.
        events = 1 + len(itls)
        w = n / events if events else 0
        t = s + ttft
        tokens += w * (lo <= t <= hi)
        for g in itls:
            t += g
            tokens += w * (lo <= t <= hi)
    ttfts = [x for x in r["ttfts"] if x]
    # Its ramp sends every stream at once, so the first requests queue behind full-length
    # ones: the TTFT of requests started in the steady window is the one a hold measures.
    steady_ttfts = [x for s, x in zip(starts, r["ttfts"]) if x and lo <= s <= hi]
    return {
        "ttft_p50_steady": statistics.median(steady_ttfts) if steady_ttfts else None,
        "tok_s": r["output_throughput"],
        "tok_s_steady": tokens / (hi - lo) if hi > lo else None,
        "steady_s": hi - lo,
        "ttft_p50": statistics.median(ttfts),
        "window_s": r["duration"],
        "requests": r["completed"],
        "errors": r["num_prompts"] - r["completed"] if "num_prompts" in r else None,
        "cpu_cores": cpu / wall,
        "served_in": r["total_input_tokens"] / max(1, r["completed"]),
        "served_out": r["total_output_tokens"] / max(1, r["completed"]),
    }


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{1000 * v:.1f}ms"


def main() -> int:
    serve = _serve_module()
    tmp = Path(tempfile.mkdtemp(prefix="peer-agreement-"))
    rows = [json.loads(line) for line in DATASET.read_text().splitlines() if line.strip()]
    probe = StallProbe()
    probe.start()
    results: list[tuple[int, str, dict, tuple[int, float]]] = []
    python = serve.ensure_venv()
    model_dir = serve.ensure_model(python)
    with serve.VllmServer(extra_args=["--max-num-seqs", "4"], python=python,
                          model_dir=model_dir) as server:  # fmt: skip
        # Both clients get the same entries: those whose prompt and reply fit the server's
        # 1024-token context (vLLM's loader keeps up to 2048, which this server refuses).
        fits = _fitting(server.url, rows)
        sharegpt, jsonl = tmp / "fits.json", tmp / "fits.jsonl"
        sharegpt.write_text(json.dumps(fits))
        jsonl.write_text("".join(json.dumps(r) + "\n" for r in fits))
        print(f"{len(fits)} of {len(rows)} entries fit", flush=True)
        for conc in CONCURRENCY:
            for name in ("headroom", "vllm"):
                m0 = time.monotonic()
                if name == "headroom":
                    res = run_headroom(server.url, conc, tmp, jsonl)
                else:
                    res = run_vllm(server.url, model_dir, python, conc, tmp, sharegpt)
                stalls = probe.stalls(m0, time.monotonic())
                results.append((conc, name, res, stalls))
                print(conc, name, res, stalls, flush=True)
    probe.stop()
    lines = [
        "headroom sweep vs vllm bench serve on one real vLLM (vllm-cpu 0.32.0, tiny random Llama, "
        "--max-num-seqs 4, --max-model-len 1024, float32), same dataset "
        f"({DATASET.relative_to(ROOT)}, the entries whose prompt and reply fit 1024 tokens, ShareGPT, "
        "reply lengths as max_tokens, ignore_eos)",
        f"machine: {describe()}; server and clients share its cores (the engine busy-polls ~1.7)",
        f"headroom: one step, {WARM_S:g} s warm-up then a {HOLD_S:g} s hold; vllm: its whole run "
        f"(ramp and tail included), and its tokens between {WARM_S:g} s after its first request "
        "and its last request's start (steady)",
        "",
        f"{'conc':>4} {'client':<9} {'out tok/s':>9} {'steady':>7} {'TTFT p50':>9} {'steady':>8} {'window':>7} "
        f"{'reqs':>5} {'err':>4} {'CPU cores':>9} {'in/out per req':>15} {'stalls':>10}",
    ]
    for conc, name, r, (n, lost) in results:
        steady = r.get("tok_s_steady")
        lines.append(
            f"{conc:>4} {name:<9} {r['tok_s']:>9.1f} {'-' if steady is None else f'{steady:.1f}':>7} "
            f"{1000 * r['ttft_p50']:>7.1f}ms {_ms(r.get('ttft_p50_steady')):>8} "
            f"{r['window_s']:>6.1f}s {r['requests']:>5} "
            f"{'-' if r['errors'] is None else r['errors']:>4} {r['cpu_cores']:>9.2f} "
            f"{r['served_in']:>7.1f}/{r['served_out']:<7.1f} {n:>3} {lost:>5.1f}s"
        )
    for conc in CONCURRENCY:
        hr = next(r for c, nm, r, _ in results if c == conc and nm == "headroom")
        vl = next(r for c, nm, r, _ in results if c == conc and nm == "vllm")
        steady = vl.get("tok_s_steady")
        lines.append(
            f"at {conc}: headroom/vllm output tok/s {hr['tok_s'] / vl['tok_s']:.3f} (whole run), "
            + (f"{hr['tok_s'] / steady:.3f} (vllm steady window); " if steady else "")
            + f"TTFT p50 difference {1000 * (hr['ttft_p50'] - vl['ttft_p50']):+.1f} ms (whole run)"
            + (
                f", {1000 * (hr['ttft_p50'] - vl['ttft_p50_steady']):+.1f} ms (vllm steady window)"
                if vl.get("ttft_p50_steady")
                else ""
            )  # fmt: skip
        )
    OUT.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
