"""How many concurrent SSE streams and events per second one simulator process sustains on one core.

The simulator runs pinned to CPU 0, this client (aiohttp) on CPU 1. Each level keeps
N streams open (64-token completions, ignore_eos) for a measured window after a
warm-up, and reports the client's events/s, its mean inter-token gap against the
engine's own (a server that keeps up delivers at the engine's pace), TTFT p50 and
the simulator's CPU. Two pacings: "paced" steps of 40 ms (host work simulated, not
burnt: 25 tokens/s per stream, a loaded big model), and "flat out" (an 8B model on
an H100, ~6 ms steps), which asks more than one core can deliver.

A stall probe (5 ms sleeps, gaps over 50 ms logged) runs beside; windows with
stalls are flagged and each level is repeated, medians quoted.

    .venv/bin/python bench/sim_throughput.py [--repeats 3] [--window 8] > bench/results/sim_throughput.txt
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from loadgen.stall import StallProbe  # noqa: E402
from simulator import start_sim  # noqa: E402

PACINGS = {
    # 40 ms steps whatever the batch: the host part is simulated but not burnt.
    "paced": "[engine]\nmax_num_seqs = 1024\nmax_num_batched_tokens = 16384\ncpu_step_s = 0.04\ncpu_per_seq_s = 0.0\ncpu_scale = 0.0\n",
    "flat-out": "[engine]\nmax_num_seqs = 1024\nmax_num_batched_tokens = 16384\ncpu_scale = 0.0\n",
}  # fmt: skip
TOKENS = 64


@dataclass
class Level:
    streams: int
    events_per_s: float
    streams_per_s: float
    client_itl_ms: float
    engine_itl_ms: float
    ttft_p50_ms: float
    sim_cpu: float
    stalls: int

    @property
    def cpu_us_per_event(self) -> float:
        # The simulator's CPU (engine, HTTP, everything) per delivered event: robust to
        # contention, and 1e6 / it is what one whole core would sustain.
        return 1e6 * self.sim_cpu / self.events_per_s if self.events_per_s else float("nan")


def pin_process(pid: int, cpu: int) -> None:
    for task in Path(f"/proc/{pid}/task").iterdir():
        os.sched_setaffinity(int(task.name), {cpu})


def process_cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def engine_itl(text: str) -> tuple[float, float]:
    for fam in text_string_to_metric_families(text):
        if fam.name == "vllm:inter_token_latency_seconds":
            s = {x.name: x.value for x in fam.samples if x.name.endswith(("_sum", "_count"))}
            return s["vllm:inter_token_latency_seconds_sum"], s[
                "vllm:inter_token_latency_seconds_count"
            ]
    raise RuntimeError("no inter_token_latency histogram")


async def run_level(
    url: str, pid: int, streams: int, warmup: float, window: float, probe: StallProbe
) -> Level:
    body = {
        "model": "llama-3.1-8b",
        "prompt": "measure me",
        "max_tokens": TOKENS,
        "stream": True,
        "ignore_eos": True,
    }
    events = 0
    done = 0
    gaps: list[float] = []
    ttfts: list[float] = []
    measuring = False
    stop_at = time.monotonic() + warmup + window
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def user() -> None:
            nonlocal events, done
            while time.monotonic() < stop_at:
                start = time.monotonic()
                prev = None
                async with session.post(url + "/v1/completions", json=body) as resp:
                    async for line in resp.content:
                        if not line.startswith(b"data: {"):
                            continue
                        now = time.monotonic()
                        if measuring:
                            events += 1
                            if prev is None:
                                ttfts.append(now - start)
                            else:
                                gaps.append(now - prev)
                        prev = now
                if measuring:
                    done += 1

        tasks = [asyncio.create_task(user()) for _ in range(streams)]
        await asyncio.sleep(warmup)
        async with session.get(url + "/metrics") as r:
            itl0 = engine_itl(await r.text())
        cpu0, t0 = process_cpu_seconds(pid), time.monotonic()
        measuring = True
        await asyncio.sleep(window)
        measuring = False
        t1 = time.monotonic()
        cpu1 = process_cpu_seconds(pid)
        async with session.get(url + "/metrics") as r:
            itl1 = engine_itl(await r.text())
        await asyncio.gather(*tasks)
    span = t1 - t0
    return Level(
        streams=streams,
        events_per_s=events / span,
        streams_per_s=done / span,
        client_itl_ms=1e3 * statistics.fmean(gaps) if gaps else float("nan"),
        engine_itl_ms=1e3 * (itl1[0] - itl0[0]) / max(1.0, itl1[1] - itl0[1]),
        ttft_p50_ms=1e3 * statistics.median(ttfts) if ttfts else float("nan"),
        sim_cpu=(cpu1 - cpu0) / span,
        stalls=probe.count(t0, t1),
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--levels", default="64,128,256,512")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--warmup", type=float, default=2.0)
    ap.add_argument("--window", type=float, default=8.0)
    args = ap.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    os.sched_setaffinity(0, {1})
    probe = StallProbe()
    probe.start()
    print(
        f"# sim_throughput: {TOKENS}-token SSE streams; simulator pinned to CPU 0, aiohttp client to CPU 1"
    )
    print(
        f"# {time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} CPUs; medians of {args.repeats} runs of {args.window:.0f} s"
    )
    print(
        "# keeps up: client inter-token gap within 10% of the engine's (the server delivers at the engine's pace)"
    )
    print(
        "# CPU us/event: the simulator process's CPU per delivered event (1e6 / it = events/s on one whole core)"
    )
    for pacing, toml in PACINGS.items():
        with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
            f.write(toml)
        print(f"\n## {pacing}")
        print(
            f"{'streams':>7} {'events/s':>9} {'streams/s':>9} {'client ITL ms':>13} {'engine ITL ms':>13} {'TTFT p50 ms':>11} {'sim CPU':>7} {'CPU us/event':>12} {'stalls':>6}  keeps up"
        )
        with start_sim(scenario="idle", load=False, config=f.name) as sim:
            pin_process(sim.pid, 0)
            for n in levels:
                runs = [
                    asyncio.run(run_level(sim.url, sim.pid, n, args.warmup, args.window, probe))
                    for _ in range(args.repeats)
                ]
                clean = [r for r in runs if r.stalls == 0] or runs

                def med(attr: str, rs: list[Level] = clean) -> float:
                    return statistics.median(getattr(r, attr) for r in rs)

                keeps = med("client_itl_ms") <= 1.1 * med("engine_itl_ms")
                flag = (
                    ""
                    if len(clean) == len(runs)
                    else f" ({len(runs) - len(clean)} stalled run(s) dropped)"
                )
                print(
                    f"{n:>7} {med('events_per_s'):>9.0f} {med('streams_per_s'):>9.1f} {med('client_itl_ms'):>13.1f} "
                    f"{med('engine_itl_ms'):>13.1f} {med('ttft_p50_ms'):>11.1f} {100 * med('sim_cpu'):>6.0f}% "
                    f"{med('cpu_us_per_event'):>12.1f} "
                    f"{sum(r.stalls for r in runs):>6}  {'yes' if keeps else 'no'}{flag}",
                    flush=True,
                )
        os.unlink(f.name)
    probe.stop()


if __name__ == "__main__":
    main()
