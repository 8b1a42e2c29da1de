"""The what-if on real vLLM (CPU build, tiny model; deploy/vllm-cpu), one case (run by hand).

Start vLLM with ``--max-num-seqs 4``; hold 16 streams on it (`headroom sweep --concurrency
16`) and, during the hold, take `headroom snapshot --json`: its what-if names the value to
try. Restart vLLM with that value, run an adaptive sweep (doubling from one stream, then
bisecting the knee) and set the predicted throughput and limit beside the saturation point
and cause the sweep measured. Appends to bench/results/whatif_sim.txt.

    .venv/bin/python bench/whatif_vllm.py [--out bench/results/whatif_sim.txt]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "deploy" / "vllm-cpu"))

import serve  # noqa: E402  deploy/vllm-cpu/serve.py

LOAD = ["--input-tokens", "32", "--output-tokens", "200"]


def headroom(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "headroom", *args], cwd=ROOT, text=True,
                          capture_output=True, timeout=timeout, check=False)  # fmt: skip


def server(seqs: int) -> serve.VllmServer:
    python = serve.ensure_venv()
    return serve.VllmServer(
        extra_args=["--max-num-seqs", str(seqs)],
        python=python,
        model_dir=serve.ensure_model(python),
        startup_timeout=420,
        die_with_parent=False,
    )


def whatif_under_load(url: str, out: Path) -> dict[str, Any]:
    """The snapshot taken while 16 streams press on the cap."""
    snap: dict[str, Any] = {}

    def take() -> None:
        time.sleep(14)
        r = headroom("snapshot", "--vllm", url, "--no-nvml", "--window", "10", "--json")
        snap.update(json.loads(r.stdout))

    t = threading.Thread(target=take)
    t.start()
    headroom("sweep", "--target", url, "--concurrency", "16", "--step-seconds", "30",
             "--warmup-seconds", "4", "--quiet", "--out", str(out), *LOAD)  # fmt: skip
    t.join()
    return snap


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "whatif_sim.txt")
    p.add_argument("--seqs", type=int, default=4)
    args = p.parse_args()
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        with server(args.seqs) as vllm:
            snap = whatif_under_load(vllm.url, Path(tmp) / "hold")
        e = snap["engines"][0]
        whatif = e.get("whatif") or []
        hold = json.loads((Path(tmp) / "hold" / "sweep.json").read_text())["steps"][-1]
        hold_fix = next(
            (v["fix"] for v in hold.get("verdicts") or () if v["cause"] == "seq-cap"), None
        )
        rows = [
            f"vllm-cpu: --max-num-seqs {args.seqs}, 16 streams of 32+200 tokens: running "
            f"{e['running']}, waiting {e['waiting']}, {e['generation_tokens_per_s']} tok/s; "
            f"verdict {snap['verdicts'][0]['cause'] if snap['verdicts'] else None}",
            f"  the sweep's hold itself (its own window): {hold['output_tokens_per_s']:.0f} tok/s at "
            f"the client, running {hold.get('running_mean')}; its seq-cap fix: {hold_fix}",
        ]
        if not whatif:
            rows.append("  no what-if (nothing predicted)")
        else:
            w = whatif[0]
            pr = w["predicted"]
            rows.append(f"  [0] {w['flag']} {w['current']} -> {w['proposed']}: predicted "
                        f"{pr['limit']} at {pr['concurrency']} streams, {pr['throughput_tok_s']} "
                        f"tok/s (x{pr['gain']}); basis {json.dumps(w['basis'])}")  # fmt: skip
            with server(int(w["proposed"])) as vllm:
                out = Path(tmp) / "after"
                headroom("sweep", "--target", vllm.url, "--max-concurrency", "64",
                         "--step-seconds", "8", "--warmup-seconds", "2", "--quiet",
                         "--out", str(out), *LOAD)  # fmt: skip
            result = json.loads((out / "sweep.json").read_text())
            sat = result["saturation"]
            steps = " ".join(
                f"{s['concurrency']}:{s['output_tokens_per_s']:.0f}/{s.get('running_mean')}"
                for s in result["steps"]
            )
            tok = sat.get("output_tokens_per_s")
            ratio = pr["throughput_tok_s"] / tok if tok else None
            rows.append(
                f"      measured saturation {sat.get('concurrency')} streams, {tok} tok/s, cause "
                f"{sat.get('cause')}; tok/s predicted/measured "
                f"{'-' if ratio is None else f'{ratio:.3f}'}; limit named "
                f"{'right' if sat.get('cause') == pr['limit'] else 'WRONG'}"
            )
            rows.append(f"      steps (c:tok/s/running) {steps}; {sat.get('reason')}")
            at_old_cap = next(
                (x for x in result["steps"] if x["concurrency"] == w["current"]), None
            )
            if at_old_cap and tok:
                rows.append(
                    f"      gain: predicted x{pr['gain']}, measured x"
                    f"{tok / at_old_cap['output_tokens_per_s']:.3f} (the relaunched box at "
                    f"{w['current']} streams against its saturation); ratio "
                    f"{pr['gain'] * at_old_cap['output_tokens_per_s'] / tok:.3f}"
                )
    rows.append(f"  [{time.monotonic() - t0:.0f} s]")
    print("\n".join(rows))
    with args.out.open("a") as f:
        f.write("\n# real vLLM (CPU build, tiny model; bench/whatif_vllm.py), "
                f"{time.strftime('%Y-%m-%d %H:%M')}:\n" + "\n".join(rows) + "\n")  # fmt: skip


if __name__ == "__main__":
    main()
