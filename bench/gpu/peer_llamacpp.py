"""headroom sweep beside GuideLLM on one llama-server, load by load: output tokens/s and TTFT.

    python bench/gpu/peer_llamacpp.py --tokenizer DIR (--target URL | --server BIN --model GGUF
        | --cpu-tiny) [--loads 1,4,16,32] [--input-tokens 256] [--output-tokens 256]
        [--warmup-s 5] [--hold-s 25] [--parallel 32] [--guidellm "python3 -m guidellm"]
        [--nvml auto|on|off] [--no-dephase] [--out FILE] [--work DIR]

Both clients send the same requests: synthetic prompts of exactly --input-tokens tokens
counted with the model's own tokenizer (DIR: the Hugging Face folder that
deploy/llamacpp/make_tiny_gguf.py --bpe-tokenizer writes beside the GGUF, the same vocabulary
and merges llama-server tokenizes with), --output-tokens generated with ignore_eos, streamed,
over /v1/completions, at a fixed concurrency. At each load headroom runs first (`headroom
sweep --concurrency N --tokenizer DIR`, one step: a warm-up, then the hold), then GuideLLM
(`guidellm run`: a concurrent profile of N streams for warm-up + hold seconds, its warm-up
excluded). Each client's figures are its own: headroom's step (output tokens/s over the hold,
TTFT p50), GuideLLM's JSON report (output_tokens_per_second, time_to_first_token_ms p50),
and each client's prompt and output tokens per request as the server's usage reported them.
Where this host has a GPU (--nvml auto: nvidia-smi lists one), headroom's sweep also reads it
through NVML (`--nvml`): the GPU's mean power and joules per output token over its hold.

The server: a running one (--target), one started here on a GPU (--server/--model, every
layer offloaded, --parallel slots), or --cpu-tiny, the tiny model with the BPE tokenizer
served by deploy/llamacpp/serve.py on one thread (the CPU build of deploy/llamacpp/setup.sh).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import shlex
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.machine import describe  # noqa: E402


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _load(name: str, path: Path) -> ModuleType:
    # deploy/ and bench/gpu/ are folders of scripts, not packages: load by path.
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


class Referee:
    """The server's own count of generated tokens (llamacpp:tokens_predicted_total) read
    every half second, so each client's window gets the server's rate beside the client's."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="referee", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                with urllib.request.urlopen(self.url + "/metrics", timeout=5) as r:
                    text = r.read().decode()
                for line in text.splitlines():
                    if line.startswith("llamacpp:tokens_predicted_total "):
                        self.samples.append((time.time(), float(line.split()[1])))
            except OSError:
                pass
            self._stop.wait(0.5)

    def rate(self, t0: float, t1: float) -> float | None:
        """Generated tokens per second over [t0, t1] (wall), interpolated between samples."""

        def at(t: float) -> float | None:
            before = [x for x in self.samples if x[0] <= t]
            after = [x for x in self.samples if x[0] >= t]
            if not before or not after:
                return None
            (ta, va), (tb, vb) = before[-1], after[0]
            return va if tb == ta else va + (vb - va) * (t - ta) / (tb - ta)

        v0, v1 = at(t0), at(t1)
        return None if v0 is None or v1 is None or t1 <= t0 else (v1 - v0) / (t1 - t0)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


ENERGY = ("gpu_power_watts", "energy_per_token_joules", "tokens_per_joule", "energy_source")


def gpu_here() -> bool:
    """Whether nvidia-smi lists a GPU on this host (the sweep's --nvml then reads it)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return False
    try:
        listed = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return listed.returncode == 0 and "GPU" in listed.stdout


def run_headroom(a: argparse.Namespace, url: str, load: float, work: Path) -> dict[str, Any]:
    out = work / f"headroom-{load}"
    cmd = [
        sys.executable, "-m", "headroom", "sweep", "--target", url, "--api", "completions",
        *(("--rates", f"{load:g}", "--arrival", a.arrival) if a.open_loop
          else ("--concurrency", str(load))),
        "--step-seconds", str(a.hold_s),
        "--warmup-seconds", str(a.warmup_s), "--input-tokens", str(a.input_tokens),
        "--output-tokens", str(a.output_tokens), "--tokenizer", str(a.tokenizer),
        "--quiet", "--out", str(out),
    ]  # fmt: skip
    if a.nvml_on:
        cmd.append("--nvml")
    if a.no_dephase:
        # Its users then start together, as GuideLLM's streams do: the like-for-like load.
        cmd.append("--no-dephase")
    # This checkout first; what PYTHONPATH held (carried wheels on the GPU machine) after it.
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = dict(os.environ, PYTHONPATH=path)
    t0, cpu0 = time.monotonic(), _children_cpu()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, timeout=900)
    cpu = _children_cpu() - cpu0
    (work / f"headroom-{load}.log").write_text(proc.stdout + "\n--- stderr\n" + proc.stderr)
    if proc.returncode != 0 or not (out / "sweep.json").exists():
        raise RuntimeError(f"headroom sweep rc={proc.returncode}: {proc.stderr.strip()[-600:]}")
    result = json.loads((out / "sweep.json").read_text())
    step = result["steps"][-1]
    return {
        "tok_s": step["output_tokens_per_s"],
        "ttft_p50_s": step["ttft_p50_s"],
        "itl_p50_s": step.get("itl_p50_s"),
        "window": (step["hold_start"], step["hold_end"]),
        "window_s": step["duration_s"],
        "requests": step["requests_completed"],
        "errors": step["requests_failed"],
        "prompt_tokens": step.get("served_prompt_tokens_mean"),
        "output_tokens": step.get("served_completion_tokens_mean"),
        # Energy over the hold, from the GPUs NVML reads (None without --nvml or a counter).
        **{k: step.get(k) for k in ENERGY},
        "notes": [n for n in result.get("notes", []) if "exact" in n or "token" in n][:2]
        + [n for n in result.get("notes", []) if "NVML" in n or "energy" in n][:2],
        "wall_s": round(time.monotonic() - t0, 1),
        "cpu_s": round(cpu, 1),  # the client's processes, start-up included
        "records": str(out / "requests.jsonl"),
    }


def guidellm_scenario(
    a: argparse.Namespace, url: str, load: float, report: Path, seed: int
) -> dict[str, Any]:
    """GuideLLM's run, as a scenario file: one concurrent benchmark of ``load`` streams, or
    with --open-loop one of ``load`` requests/s sent at constant intervals (or as Poisson
    arrivals with --arrival poisson).

    Its synthetic prompts follow its seed: the same seed twice sends the same prompts, which
    llama-server then serves from its prompt cache (a TTFT of a few ms). Each run gets its
    own seed, as headroom's workers seed theirs with their pid."""
    return {
        "spec": {
            "backend": {
                "kind": "openai_http", "target": url, "model": a.model_name,
                "request_format": "/v1/completions", "stream": True, "http2": False,
            },
            "profile": {
                **({"kind": a.arrival, "rate": [load]} if a.open_loop
                   else {"kind": "concurrent", "streams": [load]}),
                "warmup": {"mode": "duration", "value": a.warmup_s},
            },
            "tokenizer": {"kind": "huggingface_auto", "model": str(a.tokenizer)},
            # output_tokens makes GuideLLM send max_tokens with ignore_eos: exact replies.
            "data": [{
                "kind": "synthetic_text", "prompt_tokens": a.input_tokens,
                "output_tokens": a.output_tokens,
            }],
            "constraints": [{"kind": "max_duration", "seconds": a.warmup_s + a.hold_s}],
            "seed": {"kind": "static", "value": seed},
            "outputs": [{"kind": "json", "path": str(report)}],
        }
    }  # fmt: skip


def run_guidellm(a: argparse.Namespace, url: str, load: float, work: Path) -> dict[str, Any]:
    scenario, report = work / f"guidellm-{load}.scenario.json", work / f"guidellm-{load}.json"
    seed = int(time.time() * 1000) % 1_000_000_007
    scenario.write_text(json.dumps(guidellm_scenario(a, url, load, report, seed), indent=1))
    cmd = [*shlex.split(a.guidellm), "run", "--scenario", str(scenario), "--disable-progress"]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONUNBUFFERED="1")
    t0, cpu0 = time.monotonic(), _children_cpu()
    # Written as it runs: --together starts headroom when this log says the benchmark began.
    log_path = work / f"guidellm-{load}.log"
    with log_path.open("w") as sink:
        proc = subprocess.run(cmd, stdout=sink, stderr=subprocess.STDOUT, text=True, cwd=work,
                              env=env, timeout=900)  # fmt: skip
    cpu = _children_cpu() - cpu0
    if proc.returncode != 0 or not report.exists():
        raise RuntimeError(f"guidellm rc={proc.returncode}: {log_path.read_text()[-600:]}")
    bench = json.loads(report.read_text())["benchmarks"][-1]
    m = bench["metrics"]
    done = bench["requests"]["successful"]
    cached = [r.get("cached_tokens") or 0 for r in done]
    return {
        "tok_s": m["output_tokens_per_second"]["total"]["mean"],
        "ttft_p50_s": m["time_to_first_token_ms"]["successful"]["percentiles"]["p50"] / 1000,
        "itl_p50_s": m["inter_token_latency_ms"]["successful"]["percentiles"]["p50"] / 1000,
        "window": (bench["start_time"], bench["end_time"]),
        "window_s": bench["duration"],
        "requests": m["request_totals"]["successful"],
        "errors": m["request_totals"]["errored"],
        "prompt_tokens": m["prompt_token_count"]["successful"]["mean"],
        "output_tokens": m["output_token_count"]["successful"]["mean"],
        # The server's usage: prompt tokens it took from its cache (0 when prompts are fresh).
        "cached_tokens": sum(cached) / len(cached) if cached else None,
        "seed": seed,
        "wall_s": round(time.monotonic() - t0, 1),
        "cpu_s": round(cpu, 1),  # the client's processes, start-up included
        "report": str(report),
    }


CHECK_TEXTS = (
    "the and of",
    "It is a truth universally acknowledged, that a single man in possession of a good fortune",
    "Hello, world! It's 2026; numbers 12345 and 3.14 -- don't we'll  spaces\n\nnew\tlines",
    "naive cafe \u2014 \u201cquotes\u201d \u65e5\u672c\u8a9e \U0001f642",
)


def _p50(values: list[float]) -> float | None:
    if not values:
        return None
    v = sorted(values)
    mid = len(v) // 2
    return v[mid] if len(v) % 2 else (v[mid - 1] + v[mid]) / 2


def headroom_in_window(records: Path, start: float, end: float) -> tuple[float, float | None, int]:
    """Output tokens/s, TTFT p50 and requests sent, over [start, end], from headroom's own
    per-request records, counted as its sweep counts them (loadgen.stats.tokens_in_window)."""
    from loadgen.records import RequestRecord, parse_line
    from loadgen.stats import tokens_in_window

    recs = [r for r in map(parse_line, records.read_text().splitlines())
            if isinstance(r, RequestRecord) and r.ok and r.ttft is not None]  # fmt: skip
    ttfts = [r.ttft for r in recs if start <= r.start <= end]
    tokens = sum(tokens_in_window(r, start, end) for r in recs)
    return tokens / (end - start), _p50(ttfts), len(ttfts)


def guidellm_in_window(report: Path, start: float, end: float) -> tuple[float, float | None, int]:
    """The same from GuideLLM's report: its requests' first and last token times, the tokens
    between them spread evenly (its report keeps no time for each token)."""
    bench = json.loads(report.read_text())["benchmarks"][-1]
    tokens, ttfts = 0.0, []
    for r in bench["requests"]["successful"]:
        tm = r["info"]["timings"]
        first, last, n = (
            tm.get("first_token_iteration"),
            tm.get("last_token_iteration"),
            r["output_tokens"],
        )
        if first is None or not n:
            continue
        if start <= r["request_start_time"] <= end:
            ttfts.append(r["time_to_first_token_ms"] / 1000)
        last = last if last is not None else first
        for k in range(int(n)):
            t = first if n == 1 else first + (last - first) * k / (n - 1)
            tokens += start <= t <= end
    return tokens / (end - start), _p50(ttfts), len(ttfts)


def run_together(a: argparse.Namespace, url: str, load: float, work: Path) -> dict[str, Any]:
    """Both clients on the server at once, each at ``load``: one server state for both.

    GuideLLM starts first (its start-up is the slower and varies), headroom as soon as
    GuideLLM's log says its benchmark began, and GuideLLM holds --together-lead s longer at
    each end than headroom's warm-up and hold. Each client's figures are then read again over
    the window both held, from each one's per-request records."""
    lead = a.together_lead
    gl_args = argparse.Namespace(**{**vars(a), "hold_s": a.hold_s + 2 * lead})
    out: dict[str, Any] = {}

    def began() -> bool:
        gl_log = work / f"guidellm-{load}.log"
        return gl_log.exists() and "Starting benchmark" in gl_log.read_text(errors="replace")

    def go(who: str, fn: Any, args: argparse.Namespace, wait: bool) -> None:
        until = time.monotonic() + 600
        while wait and not began() and "guidellm_error" not in out and time.monotonic() < until:
            time.sleep(0.2)
        try:
            out[who] = fn(args, url, load, work)
        except Exception as exc:  # one failed client must not cost the other's
            out[f"{who}_error"] = str(exc)[:300]

    threads = [
        threading.Thread(target=go, args=("guidellm", run_guidellm, gl_args, False)),
        threading.Thread(target=go, args=("headroom", run_headroom, a, True)),
    ]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    h, g = out.get("headroom"), out.get("guidellm")
    if h and g:
        start, end = max(h["window"][0], g["window"][0]), min(h["window"][1], g["window"][1])
        if end - start < 5:
            out["headroom_error"] = f"the clients' holds overlapped {end - start:.1f} s only"
            return out
        for res, fn, src in ((h, headroom_in_window, "records"), (g, guidellm_in_window, "report")):
            res["own"] = {k: res[k] for k in ("tok_s", "ttft_p50_s", "requests", "window")}
            res["tok_s"], res["ttft_p50_s"], res["requests"] = fn(Path(res[src]), start, end)
            res["window"] = (start, end)
            res["cpu_s"] = None  # both clients' processes ran at once: not told apart
    return out


def tokenize_check(url: str, tokenizer: Path) -> str:
    """The server's /tokenize against the tokenizer folder, text by text: are the ids the same?"""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer / "tokenizer.json"))
    same = 0
    for text in CHECK_TEXTS:
        req = urllib.request.Request(
            url + "/tokenize",
            data=json.dumps({"content": text}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=30) as r:
            served = json.loads(r.read())["tokens"]
        same += served == tok.encode(text).ids
    return f"{same} of {len(CHECK_TEXTS)} test texts tokenize to the same ids on the server and in {tokenizer.name}"


def _ratio(x: float | None, y: float | None) -> float | None:
    return None if not x or not y else x / y


def table(a: argparse.Namespace, rows: list[dict[str, Any]], server_desc: str, check: str) -> str:
    read = any((r.get("headroom") or {}).get("energy_per_token_joules") for r in rows)
    lines = [
        "headroom sweep beside GuideLLM on one llama-server, load by load (bench/gpu/peer_llamacpp.py)",
        f"server: {server_desc}",
        f"machine: {describe()}",
        f"requests: {a.input_tokens}-token synthetic prompts (both counted with the model's own "
        f"BPE tokenizer, {a.tokenizer.name}), {a.output_tokens} output tokens with ignore_eos, "
        "streamed, /v1/completions; " + check + "; each client at each load: "
        f"{a.warmup_s:g} s warm-up (excluded) then {a.hold_s:g} s measured; {a.rounds} round(s), "
        "the first with headroom first, the next with GuideLLM first, and so on; "
        "server tok/s: llama.cpp's own tokens_predicted_total over each client's window; "
        "gl cached: prompt tokens per request the server took from its cache",
        "load: "
        + (
            (
                "requests/s, open loop, sent at constant intervals by both (headroom sweep --rates R "
                "--arrival constant; GuideLLM's constant profile)"
                if a.arrival == "constant"
                else "requests/s, open loop, Poisson arrivals from both (headroom sweep --rates R "
                "--arrival poisson; GuideLLM's poisson profile)"
            )
            if a.open_loop
            else "concurrent streams, closed loop"
        )
        + (
            f"; --together: both clients on the server at once, each at the load (the server "
            f"serves twice it), headroom started when GuideLLM's benchmark began, GuideLLM held "
            f"{2 * a.together_lead:g} s longer; each client's tok/s and TTFT p50 read "
            "again from its per-request records over the window both held (GuideLLM's tokens "
            "spread evenly between its first and last token times)"
            if a.together
            else ""
        ),
        "headroom's users: "
        + (
            "each request sent when due, whatever the replies (no users to de-phase)"
            if a.open_loop
            else "started together (--no-dephase), as GuideLLM's streams"
            if a.no_dephase
            else "de-phased (each first request a random share of its reply); GuideLLM's "
            "streams start together"
        ),
        "energy (headroom's sweep only): "
        + (
            "the GPU read through NVML (headroom sweep --nvml), its mean power and joules per "
            "output token over the hold"
            + ("" if read else "; none came back (the sweeps' notes, in peer.json, say why)")
            if a.nvml_on
            else "not read (no GPU listed by nvidia-smi here, or --nvml off)"
        ),
        "",
        f"{'load':>4} {'rnd':>3} {'headroom tok/s':>14} {'guidellm tok/s':>14} {'ratio':>6} "
        f"{'headroom TTFT p50':>17} {'guidellm TTFT p50':>17} {'ratio':>6}   "
        f"{'in/out per req (hr | gl)':<26} {'gl cached':>9} {'reqs hr/gl':>11}   "
        f"{'server tok/s hr | gl':>21} {'ITL p50 hr | gl':>19} {'client CPU s/wall s hr | gl':>28}"
        f"  {'hr GPU W':>8} {'hr J/token':>10}",
    ]
    for r in rows:
        h, g = r.get("headroom") or {}, r.get("guidellm") or {}
        tr = _ratio(h.get("tok_s"), g.get("tok_s"))
        fr = _ratio(h.get("ttft_p50_s"), g.get("ttft_p50_s"))

        def num(v: float | None, fmt: str) -> str:
            return "-" if v is None else format(v, fmt)

        def ms(v: float | None) -> str:
            return "-" if v is None else f"{1000 * v:.1f} ms"

        tokens = (
            f"{num(h.get('prompt_tokens'), '.0f')}/{num(h.get('output_tokens'), '.0f')} | "
            f"{num(g.get('prompt_tokens'), '.0f')}/{num(g.get('output_tokens'), '.0f')}"
        )
        cpu = (
            f"{num(h.get('cpu_s'), '.0f'):>6}/{num(h.get('wall_s'), '.0f'):<4} | "
            f"{num(g.get('cpu_s'), '.0f')}/{num(g.get('wall_s'), '.0f')}"
        )
        lines.append(
            f"{r['load']:>4g} {r['round']:>3} {num(h.get('tok_s'), ',.1f'):>14} {num(g.get('tok_s'), ',.1f'):>14} "
            f"{num(tr, '.3f'):>6} {ms(h.get('ttft_p50_s')):>17} {ms(g.get('ttft_p50_s')):>17} "
            f"{num(fr, '.3f'):>6}   {tokens:<26} {num(g.get('cached_tokens'), '.1f'):>9} "
            f"{h.get('requests', '-')!s:>5}/{g.get('requests', '-')!s:<5}   "
            f"{num(h.get('server_tok_s'), ',.1f'):>10} | {num(g.get('server_tok_s'), ',.1f'):<8} "
            f"{ms(h.get('itl_p50_s')):>8} | {ms(g.get('itl_p50_s')):<8} "
            f"{cpu:<28}  {num(h.get('gpu_power_watts'), '.1f'):>8} "
            f"{num(h.get('energy_per_token_joules'), '.4f'):>10}"
        )
        for who in ("headroom", "guidellm"):
            if r.get(f"{who}_error"):
                lines.append(f"     {who} failed: {r[f'{who}_error']}")
    ok = [r for r in rows if r.get("headroom") and r.get("guidellm")]
    within = [
        (r["load"], r["round"])
        for r in ok
        if abs(r["headroom"]["tok_s"] / r["guidellm"]["tok_s"] - 1) <= 0.05
        and abs(r["headroom"]["ttft_p50_s"] / r["guidellm"]["ttft_p50_s"] - 1) <= 0.05
    ]
    lines += [
        "",
        f"both figures within 5% at (load, round): {within or 'none'} "
        f"(of {[(r['load'], r['round']) for r in ok]})",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument(
        "--tokenizer", type=Path, required=True,
        help="the model's HF tokenizer folder (--cpu-tiny writes it there)",
    )  # fmt: skip
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--target", help="a running llama-server's base URL")
    where.add_argument("--server", help="a llama-server binary to start on the GPU (with --model)")
    where.add_argument(
        "--cpu-tiny", action="store_true", help="the tiny BPE model on the CPU build"
    )
    p.add_argument("--model", type=Path, help="the GGUF for --server")
    p.add_argument("--parallel", type=int, default=32)
    p.add_argument("--slot-ctx", type=int, default=2048)
    p.add_argument("--loads", default="1,4,16,32")
    p.add_argument("--input-tokens", type=int, default=256)
    p.add_argument("--output-tokens", type=int, default=256)
    p.add_argument("--warmup-s", type=float, default=5.0)
    p.add_argument("--hold-s", type=float, default=25.0)
    p.add_argument(
        "--rounds", type=int, default=1, help="repeat the loads; odd rounds swap the order"
    )
    p.add_argument(
        "--first-round", type=int, default=1,
        help="number the rounds from here (a later device call goes on where one stopped)",
    )  # fmt: skip
    p.add_argument("--model-name", default="peer", help="the model name sent in requests")
    p.add_argument("--guidellm", default=f"{sys.executable} -m guidellm", help="its command line")
    p.add_argument("--out", type=Path, default=None, help="the table (also printed)")
    p.add_argument("--deadline", type=float, default=0.0, help="epoch seconds; 0: none")
    p.add_argument("--work", type=Path, default=Path("/tmp/peer-llamacpp"))
    p.add_argument("--nvml", choices=("auto", "on", "off"), default="auto",
                   help="headroom's sweep reads this host's GPUs through NVML for energy per "
                   "token (auto: when nvidia-smi lists a GPU)")  # fmt: skip
    p.add_argument("--open-loop", action="store_true",
                   help="--loads are request rates (req/s), sent at constant intervals by both "
                   "clients: the same arrivals whatever the replies, so neither phase-locks")  # fmt: skip
    p.add_argument("--arrival", choices=("constant", "poisson"), default="constant",
                   help="with --open-loop: how both clients space their requests; poisson "
                   "(exponential gaps) keeps two clients sharing a server from holding one "
                   "fixed phase against each other, as constant intervals do")  # fmt: skip
    p.add_argument("--together", action="store_true",
                   help="both clients on the server at once, each at the load: the same server "
                   "state for both, so a drift of the server between runs cannot tell them apart")  # fmt: skip
    p.add_argument("--together-lead", type=float, default=15.0,
                   help="with --together: seconds GuideLLM holds past each end of headroom's "
                   "warm-up and hold (headroom's start-up is inside it)")  # fmt: skip
    p.add_argument("--no-dephase", action="store_true",
                   help="headroom's closed loop starts its users together (sweep --no-dephase), "
                   "as GuideLLM's concurrent profile does")  # fmt: skip
    a = p.parse_args(argv)
    a.nvml_on = a.nvml == "on" or (a.nvml == "auto" and gpu_here())
    if not a.cpu_tiny and not (a.tokenizer / "tokenizer.json").is_file():
        print(f"peer_llamacpp: no tokenizer.json in {a.tokenizer}", file=sys.stderr)
        return 1
    if a.server and not a.model:
        print("peer_llamacpp: --server needs --model", file=sys.stderr)
        return 1
    a.tokenizer = a.tokenizer.resolve()
    loads = [(float if a.open_loop else int)(x) for x in a.loads.split(",") if x]
    rounds = range(a.first_round - 1, a.first_round - 1 + a.rounds)
    for rnd in rounds:
        (a.work / f"r{rnd + 1}").mkdir(parents=True, exist_ok=True)

    server: Any = None
    if a.target:
        url, desc = a.target.rstrip("/"), f"llama-server at {a.target} (started elsewhere)"
    elif a.server:
        h200 = _load("llamacpp_h200", ROOT / "bench" / "gpu" / "llamacpp_h200.py")
        server = h200.Server(a.server, str(a.model), a.parallel, a.slot_ctx, a.work / "server.log")
        url = server.url
        desc = (
            f"{a.server} -m {a.model.name} --parallel {a.parallel} --ctx-size "
            f"{a.parallel * a.slot_ctx} -ngl 999 --metrics"
        )
    else:
        tiny = _load("make_tiny_gguf", ROOT / "deploy" / "llamacpp" / "make_tiny_gguf.py")
        serve = _load("llamacpp_serve", ROOT / "deploy" / "llamacpp" / "serve.py")
        recipe = dict(tiny.RECIPE, bpe_tokenizer=str(a.tokenizer))
        model = tiny.ensure(a.work / "tiny-bpe.gguf", recipe)
        server = serve.LlamaServer(parallel=a.parallel, slot_ctx=a.slot_ctx, model=model).start()
        url = server.url
        desc = (
            f"CPU llama-server (deploy/llamacpp/setup.sh's build), the tiny random Llama "
            f"({recipe['n_layer']}x{recipe['n_embd']}, f32) with a {recipe['vocab_size']}-token "
            f"byte-level BPE, --parallel {a.parallel} --threads 1"
        )
    log(f"server {url}: {desc}")
    rows: list[dict[str, Any]] = []
    check = "tokenize check not run"
    referee = Referee(url)
    try:
        check = tokenize_check(url, a.tokenizer)
        log(check)
        for rnd in rounds:
            # Odd rounds swap the order, so a drift of the machine weighs on both clients.
            clients = [("headroom", run_headroom), ("guidellm", run_guidellm)]
            if rnd % 2:
                clients.reverse()
            for load in loads:
                # Both clients' holds and warm-ups, and their start-ups: skip what cannot end.
                if a.deadline and time.time() + 2 * (a.warmup_s + a.hold_s) + 60 > a.deadline:
                    log(f"round {rnd + 1} load {load}: skipped, the deadline is near")
                    continue
                row: dict[str, Any] = {"load": load, "round": rnd + 1, "first": clients[0][0]}
                if a.together:
                    row["first"] = "together"
                    # The server's count is both clients' here: no column of its own.
                    row.update(run_together(a, url, load, a.work / f"r{rnd + 1}"))
                    log(f"round {rnd + 1} load {load} together: {row}")
                for who, fn in [] if a.together else clients:
                    try:
                        res = fn(a, url, load, a.work / f"r{rnd + 1}")
                        time.sleep(1.0)  # a counter sample after the window's end
                        res["server_tok_s"] = referee.rate(*res["window"])
                        row[who] = res
                        log(f"round {rnd + 1} load {load} {who}: {row[who]}")
                    except Exception as exc:  # one failed client must not cost the other's
                        row[f"{who}_error"] = str(exc)[:300]
                        log(f"round {rnd + 1} load {load} {who} failed: {exc}")
                rows.append(row)
                (a.work / "peer.json").write_text(json.dumps(rows, indent=1))
    finally:
        referee.close()
        if server is not None:
            server.stop()
    text = table(a, rows, desc, check)
    print(text, end="")
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
