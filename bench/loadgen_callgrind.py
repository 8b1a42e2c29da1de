"""The load generator's cost in instructions, per token and per request: independent of host load.

CPU seconds on a shared two-core machine move with whatever else runs; the instructions
the worker executes do not. This runs headroom's Locust worker (closed loop) under
valgrind's callgrind against loadgen_compare's simulator, zeroes the counters once the
streams are in steady state, dumps them after ``--seconds``, and divides the user-space
instructions (Ir) of that interval by the tokens and requests the records show in it.
Two runs with different completion lengths split the cost into a per-token and a
per-request part (Ir = a * tokens + b * requests). Kernel time (syscalls) is not counted
there: ``--syscalls`` runs the worker without valgrind and counts its system calls over the
same kind of interval instead (strace -c -f attached to it), split the same way.

    .venv/bin/python bench/loadgen_callgrind.py [--streams 16] [--tokens 64,8] [--seconds 20]
        [--step 0.05] [--keep DIR] [--syscalls]

``--keep DIR`` keeps the callgrind files for ``callgrind_annotate``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import loadgen_compare as lc  # noqa: E402

from loadgen.records import RecordTail, RequestRecord  # noqa: E402
from loadgen.schema import WorkerConfig  # noqa: E402

CGCTL_C = """#include <valgrind/callgrind.h>
void cg_zero(void) { CALLGRIND_ZERO_STATS; }
void cg_dump(void) { CALLGRIND_DUMP_STATS; }
"""
# Run in the worker process: SIGUSR1 zeroes callgrind's counters, SIGUSR2 dumps them, each
# noting the wall time it ran at (a Python handler runs between bytecodes, not at the signal).
WRAPPER = """import ctypes, signal, sys, time
lib = ctypes.CDLL(sys.argv[1]); stamps = open(sys.argv[2], "a", buffering=1)
def on(sig, _f):
    (lib.cg_zero if sig == signal.SIGUSR1 else lib.cg_dump)()
    stamps.write(f"{sig} {time.time():.6f}\\n")
signal.signal(signal.SIGUSR1, on); signal.signal(signal.SIGUSR2, on)
from loadgen.worker_locust import main
sys.exit(main(sys.argv[3:]))
"""


def _build_ctl(tmp: Path) -> Path:
    src, so = tmp / "cgctl.c", tmp / "libcgctl.so"
    src.write_text(CGCTL_C)
    subprocess.run(["cc", "-O1", "-shared", "-fPIC", "-o", str(so), str(src)], check=True)
    return so


def _ir(path: Path) -> int:
    for line in path.read_text().splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    raise SystemExit(f"no totals in {path}")


def _strace_counts(path: Path) -> dict[str, int]:
    """strace -c's table: calls by system call name."""
    counts: dict[str, int] = {}
    for line in path.read_text().splitlines():
        f = line.split()
        # "% time seconds usecs/call calls [errors] syscall"
        if len(f) >= 5 and f[0].replace(".", "").isdigit() and f[-1] != "total":
            counts[f[-1]] = int(f[3])
    return counts


def measure(sim: lc.Sim, so: Path, streams: int, tokens: int, seconds: float,
            keep: Path | None, syscalls: bool = False, tail_s: float = 0.0) -> dict:  # fmt: skip
    tmp = Path(tempfile.mkdtemp(prefix="lg-cg-"))
    stamps = tmp / "stamps"
    cfg = WorkerConfig(target=sim.url, model=sim.model, input_tokens=lc.INPUT_TOKENS,
                       output_tokens=tokens)  # fmt: skip
    (tmp / "cfg.json").write_text(cfg.model_dump_json())
    records = tmp / "records.jsonl"
    out = tmp / "cg.out"
    tool = [] if syscalls else ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"]
    client = subprocess.Popen(
        [*lc._pin(lc.CLIENT_CORE), *tool,
         sys.executable, "-c", WRAPPER, str(so), str(stamps),
         "--mode", "closed",
         "--config", str(tmp / "cfg.json"), "--records", str(records)],
        stdin=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=ROOT,
    )  # fmt: skip
    assert client.stdin is not None
    tail = RecordTail(records)
    deadline = time.time() + 300
    while time.time() < deadline and not records.exists():
        time.sleep(0.5)
    client.stdin.write(json.dumps({"cmd": "step", "step": 0, "concurrency": streams}).encode() + b"\n")  # fmt: skip
    client.stdin.flush()
    recs: list[RequestRecord] = []
    # Steady state: every stream has finished at least two requests.
    while time.time() < deadline and len(recs) < 2 * streams:
        recs += [r for r in tail.read_new() if isinstance(r, RequestRecord)]
        time.sleep(0.5)
    counts: dict[str, int] = {}
    if syscalls:
        trace = tmp / "strace.txt"
        a = time.time()
        strace = subprocess.Popen(["strace", "-c", "-f", "-o", str(trace), "-p", str(client.pid)],
                                  stderr=subprocess.DEVNULL)  # fmt: skip
        time.sleep(seconds)
        strace.send_signal(signal.SIGINT)
        b = time.time()
        strace.wait(timeout=60)
        counts = _strace_counts(trace)
    else:
        os.kill(client.pid, signal.SIGUSR1)
        time.sleep(seconds)
        os.kill(client.pid, signal.SIGUSR2)
        while time.time() < deadline + 60 and len(stamps.read_text().split()) < 4:
            time.sleep(0.2)
        (_, a), (_, b) = (map(float, ln.split()) for ln in stamps.read_text().splitlines()[:2])
    # The streams open at the interval's end finish before the stop, so that the tokens of
    # theirs read in it are counted (a stream stopped mid-way leaves no record).
    time.sleep(tail_s)
    client.stdin.write(b'{"cmd":"stop"}\n')
    client.stdin.close()
    client.wait(timeout=300)
    recs += [r for r in tail.read_new() if isinstance(r, RequestRecord)]
    # The interval's dump is cg.out.1 (the one at exit is cg.out).
    interval = tmp / "cg.out.1"
    ir = sum(counts.values()) if syscalls else _ir(interval)
    n_tok = n_req = shared = 0
    failed = 0
    for r in recs:
        if not r.ok:
            failed += a <= r.start < b
            continue
        if r.ttft is None or r.e2e is None:
            continue
        t = r.start + r.ttft
        n_tok += a <= t < b
        for g in r.itl:
            t += g
            n_tok += a <= t < b
            shared += g == 0 and a <= t < b  # read with the token before: its stamp is not its own
        n_req += a <= r.start + r.e2e < b
    if keep is not None and not syscalls:
        keep.mkdir(parents=True, exist_ok=True)
        shutil.copy(interval, keep / f"callgrind.out.{tokens}tok")
    shutil.rmtree(tmp, ignore_errors=True)
    row = {"tokens_per_stream": tokens, "ir": ir, "tokens": n_tok, "requests": n_req,
           "failed": failed, "seconds": round(b - a, 2),
           "shared_read_share": round(shared / max(1, n_tok), 4)}  # fmt: skip
    if syscalls:
        row["calls"] = dict(sorted(counts.items(), key=lambda kv: -kv[1]))
    return row


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--streams", type=int, default=16)
    ap.add_argument("--tokens", default="64,8")
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--step", type=float, default=0.05, help="the simulator's step, s")
    ap.add_argument("--keep", type=Path)
    ap.add_argument("--syscalls", action="store_true",
                    help="count system calls (strace -c) instead of instructions")  # fmt: skip
    args = ap.parse_args()
    so = _build_ctl(Path(tempfile.mkdtemp(prefix="lg-cg-ctl-")))
    lc.SIM_CONFIG = lc.SIM_CONFIG.replace(f"cpu_step_s = {lc.STEP_S}", f"cpu_step_s = {args.step}")
    tmp = Path(tempfile.mkdtemp(prefix="lg-cg-sim-"))
    sim = lc.Sim(tmp)
    rows = []
    unit = "syscalls" if args.syscalls else "ir"
    try:
        for n in (int(x) for x in args.tokens.split(",")):
            r = measure(sim, so, args.streams, n, args.seconds, args.keep, args.syscalls,
                        tail_s=2 * n * args.step + 2)  # fmt: skip
            rows.append(r)
            per_tok, per_req = r["ir"] / max(1, r["tokens"]), r["ir"] / max(1, r["requests"])
            print(json.dumps({**r, f"{unit}_per_token": round(per_tok, 2 if args.syscalls else None),
                              f"{unit}_per_request": round(per_req, 2 if args.syscalls else None)}),
                  flush=True)  # fmt: skip
    finally:
        sim.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    if len(rows) >= 2:
        # Ir = a * tokens + b * requests, from the first two runs.
        (t1, q1, i1), (t2, q2, i2) = ((r["tokens"], r["requests"], r["ir"]) for r in rows[:2])
        det = t1 * q2 - t2 * q1
        if det:
            a = (i1 * q2 - i2 * q1) / det
            b = (t1 * i2 - t2 * i1) / det
            u, fmt = ("syscalls", ",.2f") if args.syscalls else ("Ir", ",.0f")
            print(f"per token {a:{fmt}} {u}, per request {b:{fmt}} {u}; "
                  f"a {rows[0]['tokens_per_stream']}-token stream {a * rows[0]['tokens_per_stream'] + b:{fmt}} {u}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
