"""CPU per GET of vLLM's /metrics: the Scraper's plain-http client against http.client.

Run from the repository root:  .venv/bin/python bench/http_get_cost.py [--ticks 60]

The page: bench/agent_fault_soak.py's Page (the vLLM 0.32 capture, counters
advancing with time, no name churn) served by its PageServer in another process,
so that only the client's CPU is counted. Two Scrapers on their own kept-alive
connections: the plain-http client (monitor/sources/http_page.py, what the
Scraper uses now) and the standard library's http.client (the Scraper's https
path, which is what it used for plain http before; selected here by dropping the
Scraper's plain-http client, so the whole of get(), decode included, is compared).

Rows:
  - spaced: one GET of each every SPACING seconds (a third of a spacing apart, the
    order rotated each tick), the way the agent scrapes: the caches are
    cold again by each GET. Per GET: time.thread_time of the calling thread.
  - loop: batches of back-to-back GETs of one client, interleaved batch by batch,
    warm caches: the floor.
Quoted: median and mean per GET, and the ratio of the medians.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import machine  # noqa: E402
from monitor.sources.promtext import Scraper  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "http_get_cost.txt"


def serve() -> None:
    """The child process: the advancing page at /metrics on a free port."""
    from bench.agent_fault_soak import Page, PageServer

    server = PageServer(Page(churn=False), time.monotonic())
    print(server.port, flush=True)
    threading.Event().wait()


class Floor:
    """The least a GET can be: a prebuilt request, recv_into one buffer, Content-Length
    only, no deadline, no error handling (the quick experiment issue 19 started from)."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.settimeout(2.0)
        self.request = (
            b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept-Encoding: identity\r\n\r\n"
        )
        self.buf = bytearray(1 << 18)

    def get(self) -> str:
        self.sock.sendall(self.request)
        view = memoryview(self.buf)
        got = 0
        while (head_end := self.buf.find(b"\r\n\r\n", 0, got)) < 0:
            got += self.sock.recv_into(view[got:])
        head = bytes(self.buf[:head_end]).decode("latin-1").lower()
        length = int(head.partition("content-length:")[2].partition("\r\n")[0])
        total = head_end + 4 + length
        while got < total:
            got += self.sock.recv_into(view[got:])
        return bytes(self.buf[head_end + 4 : total]).decode()


def cpu_ms(call: Callable[[], str]) -> tuple[float, int]:
    t0 = time.thread_time()
    text = call()
    return (time.thread_time() - t0) * 1e3, len(text)


def summary(values: list[float]) -> str:
    return f"median {statistics.median(values):.3f} ms, mean {statistics.fmean(values):.3f} ms"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ticks", type=int, default=60, help="spaced GETs of each client a spacing")
    ap.add_argument(
        "--spacing", type=float, nargs="+", default=[1.0, 0.1], help="seconds between GETs"
    )
    ap.add_argument("--batches", type=int, default=9, help="loop batches of each client")
    ap.add_argument("--calls", type=int, default=200, help="GETs per loop batch")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve()
        return 0

    server = subprocess.Popen(
        [sys.executable, __file__, "--serve"], stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    load0 = os.getloadavg()[0]
    try:
        assert server.stdout is not None
        url = f"http://127.0.0.1:{server.stdout.readline().strip()}/metrics"
        raw = Scraper(url, 2.0)
        std = Scraper(url, 2.0)
        std._page = None  # the Scraper's http.client path (its https one), over plain http
        floor = Floor(int(url.rsplit(":", 1)[1].partition("/")[0]))
        clients = {"http_page": raw.get, "http.client": std.get, "floor": floor.get}
        sizes = {name: cpu_ms(get)[1] for name, get in clients.items()}
        for get in clients.values():  # warm-up: imports, the connections
            for _ in range(3):
                get()
        lines_of = {name: get().count("\n") for name, get in clients.items()}
        if len(set(lines_of.values())) != 1:
            print(f"the clients read different pages: {lines_of}", file=sys.stderr)
            return 1
        spaced: dict[float, dict[str, list[float]]] = {}
        for spacing in args.spacing:
            got: dict[str, list[float]] = {name: [] for name in clients}
            order = list(clients)
            for tick in range(args.ticks):
                for name in order:
                    time.sleep(spacing / len(order))
                    got[name].append(cpu_ms(clients[name])[0])
                order = order[1:] + order[:1]  # each client in each place in turn
                if tick % 10 == 9:
                    print(f"spacing {spacing:g} s: {tick + 1}/{args.ticks}", flush=True)
            spaced[spacing] = got
        loop: dict[str, list[float]] = {name: [] for name in clients}
        for _ in range(args.batches):
            for name, get in clients.items():
                t0 = time.thread_time()
                for _ in range(args.calls):
                    get()
                loop[name].append((time.thread_time() - t0) / args.calls * 1e3)
        raw.close()
        std.close()
        floor.sock.close()
    finally:
        server.terminate()
        server.wait(timeout=10)

    out = [
        "CPU per GET of vLLM's /metrics: the Scraper's plain-http client vs http.client",
        f"date: {dt.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}",
        f"machine: {machine.describe()}, load average {load0:.1f} at the start, "
        f"{os.getloadavg()[0]:.1f} at the end",
        f"page: bench/agent_fault_soak.py Page(churn=False), counters advancing, "
        f"{sizes['http_page']} characters, {lines_of['http_page']} lines; "
        "server in another process",
        "CPU: time.thread_time of the calling thread around Scraper.get() (send, receive, "
        "framing, decode)",
        "",
    ]
    for spacing, got in spaced.items():
        out.append(f"spaced, one GET of each every {spacing:g} s, {args.ticks} GETs each:")
        for name, values in got.items():
            out.append(f"  {name:12s} {summary(values)}")
        ratio = statistics.median(got["http.client"]) / statistics.median(got["http_page"])
        out.append(f"  http.client / http_page (medians): {ratio:.1f}x")
    out.append(f"loop, back to back, {args.batches} batches of {args.calls} GETs each:")
    for name, values in loop.items():
        out.append(f"  {name:12s} median of batches {statistics.median(values):.3f} ms per GET")
    ratio = statistics.median(loop["http.client"]) / statistics.median(loop["http_page"])
    out.append(f"  http.client / http_page (medians): {ratio:.1f}x")
    machine.write_results(args.out, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
