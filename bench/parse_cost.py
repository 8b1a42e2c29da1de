"""What parsing vLLM's /metrics costs: prometheus-client's parser against headroom's fast path.

Run from the repository root:  .venv/bin/python bench/parse_cost.py [--repeats 9]

Rows, all on tests/fixtures/vllm-0.32.0-cpu-metrics-under-load.txt (54 KB, 639 lines):
  (a) prometheus-client's text parser on the whole page;
  (b) the page narrowed to the families headroom reads, then prometheus-client (the
      previous promtext.parse);
  (c) promtext.parse with the same families: the fast path (the current code), in
      steady state: the series' name-and-labels text remembered from the last scrape;
  (c0) the same, that memory cleared before each parse: a first scrape;
  (d) engines_from_text: (c) plus grouping into EngineSamples, VllmSource's whole parse;
  (e) VllmSource.read() against an HTTP server on 127.0.0.1 in another process, so
      that time.process_time counts the client alone: fetch + parse + grouping;
  (f) promtext.Scraper.get alone (its plain-http client, http_page; http.client before
      issue 19: bench/http_get_cost.py compares the two), the HTTP share of (e);
  (g) the same GET through httpx, which the sources used before the Scraper.

Method (MACHINE.md): the rows run interleaved, one batch of each per repeat; a batch
is timed by time.process_time (CPU) and per call by time.perf_counter (wall). A stall
probe thread sleeps 5 ms in a loop and logs every gap over 50 ms; a batch that
overlaps a stall is left out when clean batches exist. Quoted: medians over the
batches, and (a)/(c), (b)/(c) ratios taken batch by batch.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from bench import fixture_server, machine  # noqa: E402
from loadgen.stall import StallProbe  # noqa: E402
from monitor.sources import metric_names, promtext  # noqa: E402
from monitor.sources.promtext import (  # noqa: E402
    Sample,
    Scraper,
    expand_names,
    parse,
    select_lines,
)
from monitor.sources.vllm import VllmSource, engines_from_text  # noqa: E402

FIXTURE = ROOT / "tests" / "fixtures" / "vllm-0.32.0-cpu-metrics-under-load.txt"
RESULTS = ROOT / "bench" / "results" / "parse_cost.txt"
NAMES = expand_names(metric_names.all_metric_names())


def serve(path: str) -> None:
    """The child process: serve ``path`` at /metrics (its CPU is not the parser's)."""
    httpd = fixture_server.start(Path(path).read_bytes())
    print(httpd.server_address[1], flush=True)
    threading.Event().wait()


def old_parse(text: str) -> tuple[Sample, ...]:
    """The previous promtext.parse on a valid page: select, then prometheus-client."""
    return tuple(
        Sample(s.name, dict(s.labels), float(s.value))
        for fam in text_string_to_metric_families(select_lines(text, NAMES))
        for s in fam.samples
    )


@dataclass
class Row:
    label: str
    call: Callable[[], object]
    calls: int  # per batch
    # per call, one entry per batch: (process CPU ms, calling thread's CPU ms, median wall ms)
    clean: list[tuple[float, float, float]] = field(default_factory=list)
    dirty: list[tuple[float, float, float]] = field(default_factory=list)

    def batch(self, probe: StallProbe) -> tuple[float, bool]:
        """Run one batch; its process CPU ms per call, and whether no stall overlapped it."""
        walls = []
        start = time.monotonic()
        cpu0, thread0 = time.process_time(), time.thread_time()
        for _ in range(self.calls):
            t0 = time.perf_counter()
            self.call()
            walls.append(time.perf_counter() - t0)
        thread = (time.thread_time() - thread0) / self.calls * 1e3
        cpu = (time.process_time() - cpu0) / self.calls * 1e3
        entry = (cpu, thread, statistics.median(walls) * 1e3)
        if probe.count(start, time.monotonic()):
            self.dirty.append(entry)
            return cpu, False
        self.clean.append(entry)
        return cpu, True

    def median(self, i: int) -> float:
        return statistics.median(e[i] for e in (self.clean or self.dirty))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=9, help="batches of each row")
    ap.add_argument("--calls", type=int, default=20, help="parses per batch")
    ap.add_argument("--reads", type=int, default=100, help="VllmSource.read() calls per batch")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--serve", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve(args.serve)
        return 0

    text = FIXTURE.read_text(encoding="utf-8")
    if parse(text, NAMES).samples != old_parse(text):
        print("the fast path and prometheus-client disagree on the fixture", file=sys.stderr)
        return 1

    def parse_cold() -> object:
        promtext._PREFIXES.clear()
        return parse(text, NAMES)

    server = subprocess.Popen(
        [sys.executable, __file__, "--serve", str(FIXTURE)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None
        url = f"http://127.0.0.1:{server.stdout.readline().strip()}"
        source = VllmSource(url)
        scraper = Scraper(source.url, 2.0)
        client = httpx.Client(timeout=2.0, headers={"Accept-Encoding": "identity"}, trust_env=False)
        try:
            failed: list[str] = []

            def read_checked() -> object:
                got = source.read()
                if got.errors:  # a failed read is cheaper: it must not pass for a fast one
                    failed.extend(e.message for e in got.errors)
                return got

            reading = source.read()
            if reading.errors or len(reading.engines) != 1:
                print(f"VllmSource.read() failed: {reading.errors}", file=sys.stderr)
                return 1
            rows = [
                Row(
                    "(a) prometheus-client, whole page",
                    lambda: list(text_string_to_metric_families(text)),
                    args.calls,
                ),
                Row("(b) filtered + prometheus-client", lambda: old_parse(text), args.calls),
                Row("(c) promtext.parse (fast path)", lambda: parse(text, NAMES), args.calls),
                Row("(c0) promtext.parse, first scrape", parse_cold, args.calls),
                Row("(d) engines_from_text", lambda: engines_from_text(text, url), args.calls),
                Row("(e) VllmSource.read() over HTTP", read_checked, args.reads),
                Row("(f) Scraper.get alone (http_page)", scraper.get, args.reads),
                Row(
                    "(g) the same GET through httpx",
                    lambda: client.get(source.url).text,
                    args.reads,
                ),
            ]
            for row in rows:  # warm-up: imports, regex compiles, the keep-alive connection
                for _ in range(3):
                    row.call()
            started = time.monotonic()
            # (a)/(c) and (b)/(c) CPU, batch by batch: [clean pairs], [all pairs]
            ratios: dict[int, tuple[list[float], list[float]]] = {0: ([], []), 1: ([], [])}
            with StallProbe() as probe:
                for i in range(args.repeats):
                    got = [row.batch(probe) for row in rows]
                    for k, (clean, every) in ratios.items():
                        every.append(got[k][0] / got[2][0])
                        if got[k][1] and got[2][1]:
                            clean.append(got[k][0] / got[2][0])
                    shown = "  ".join(f"{c:.3f}{'' if ok else '!'}" for c, ok in got)
                    print(f"repeat {i + 1}/{args.repeats} (ms, ! = stall): {shown}", flush=True)
                stalls = probe.count(started, time.monotonic())
                worst = probe.worst()
        finally:
            source.close()
            scraper.close()
            client.close()
    finally:
        server.terminate()
        server.wait(timeout=10)

    lines = [
        "vLLM /metrics parse cost: prometheus-client's parser vs headroom's fast path",
        f"date: {dt.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}",
        f"machine: {machine.describe()}, load average {os.getloadavg()[0]:.1f} at the end",
        f"input: {FIXTURE.name} ({len(text.encode())} bytes, {len(text.splitlines())} lines); "
        f"{len(NAMES)} wanted sample names, {len(parse(text, NAMES).samples)} samples kept",
        f"method: rows interleaved, {args.repeats} batches each of {args.calls} parses "
        f"(rows e, f: {args.reads} reads); CPU = time.process_time per call (server in another "
        "process), wall = median time.perf_counter per call",
        f"stall probe (5 ms sleeps, gap > 50 ms): {stalls} stall(s) during the run, "
        f"worst {worst * 1e3:.0f} ms; batches with a stall are left out when clean ones exist",
        "",
        f"{'row':36s} {'CPU ms':>8s} {'thread ms':>9s} {'wall ms':>8s} {'clean':>6s}",
    ]
    for row in rows:
        flag = " *" if not row.clean else ""
        lines.append(
            f"{row.label:36s} {row.median(0):8.3f} {row.median(1):9.3f} {row.median(2):8.3f} "
            f"{len(row.clean):>3d}/{args.repeats:<2d}{flag}"
        )
    if any(not row.clean for row in rows):
        lines.append("* every batch of this row saw a stall: median of all batches")

    read = rows[5]
    if failed:
        lines.append(f"!! {len(failed)} VllmSource.read() calls failed, e.g. {failed[0]}")

    def ratio(k: int) -> str:
        clean, every = ratios[k]
        if len(clean) >= 3:
            return f"{statistics.median(clean):.1f}x ({len(clean)} clean pairs)"
        return f"{statistics.median(every):.1f}x (all {len(every)} pairs: too few clean)"

    lines += [
        "",
        f"CPU of (a) over (c), median per batch: {ratio(0)}",
        f"CPU of (b) over (c), median per batch: {ratio(1)}",
        f"VllmSource.read() CPU per read: {read.median(0):.3f} ms process, "
        f"{read.median(1):.3f} ms its own thread = {read.median(0) / 10:.3f}% of one core at "
        f"one read per second (target < 1.5 ms: {'met' if read.median(0) < 1.5 else 'NOT met'})",
        f"parts of (e), thread CPU: fetch (f) {rows[6].median(1):.3f} + parse (c) "
        f"{rows[2].median(1):.3f} + grouping into EngineSamples (d)-(c) "
        f"{rows[4].median(1) - rows[2].median(1):.3f} = "
        f"{rows[6].median(1) + rows[4].median(1):.3f} ms measured apart",
        "CPU ms: time.process_time, which also counts the stall probe thread (200 wake-ups a",
        "second): it inflates rows with long wall times. thread ms: the calling thread alone.",
    ]
    machine.write_results(args.out, lines)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
