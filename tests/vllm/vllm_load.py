"""A small closed-loop streaming client for the vLLM integration tests.

Each of ``concurrency`` workers sends one streaming completion after another until stopped.
``ignore_eos`` makes each request last exactly ``max_tokens`` tokens: random weights would
otherwise stop at random. Runs its own event loop in a thread, so a test can start a load,
run `headroom` beside it and stop the load.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field

import aiohttp

MODEL = "tiny-llama"
PROMPT = "The server is busy and the GPU is idle because"


@dataclass
class LoadStats:
    completed: int = 0
    errors: list[str] = field(default_factory=list)
    latencies_s: list[float] = field(default_factory=list)
    tokens: int = 0

    def mean_latency_s(self) -> float:
        return sum(self.latencies_s) / len(self.latencies_s)


async def stream_one(
    session: aiohttp.ClientSession, url: str, max_tokens: int, stats: LoadStats
) -> None:
    body = {
        "model": MODEL,
        "prompt": PROMPT,
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "stream": True,
        "temperature": 1.0,
    }
    t0 = time.monotonic()
    chunks = 0
    async with session.post(url + "/v1/completions", json=body) as resp:
        if resp.status != 200:
            stats.errors.append(f"HTTP {resp.status}: {(await resp.text())[:200]}")
            return
        async for line in resp.content:
            if line.startswith(b"data: ") and not line.startswith(b"data: [DONE]"):
                chunks += 1
    stats.completed += 1
    stats.tokens += chunks
    stats.latencies_s.append(time.monotonic() - t0)


class Load:
    """``concurrency`` closed-loop streams against ``url`` until :meth:`stop` (or ``with``)."""

    def __init__(self, url: str, concurrency: int, max_tokens: int) -> None:
        self.url = url
        self.concurrency = concurrency
        self.max_tokens = max_tokens
        self.stats = LoadStats()
        self._loop = asyncio.new_event_loop()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="vllm-test-load", daemon=True)
        self._ready = threading.Event()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._main())
        finally:
            self._loop.close()

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        self._ready.set()
        timeout = aiohttp.ClientTimeout(total=120)
        connector = aiohttp.TCPConnector(limit=self.concurrency + 2)
        async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
            workers = [asyncio.create_task(self._worker(session)) for _ in range(self.concurrency)]
            await self._stop.wait()
            # Cancelling closes the streams, and vLLM aborts those requests: the load ends now,
            # not when the last request would have finished.
            for w in workers:
                w.cancel()
            await asyncio.gather(*workers, return_exceptions=True)

    async def _worker(self, session: aiohttp.ClientSession) -> None:
        assert self._stop is not None
        while not self._stop.is_set():
            try:
                await stream_one(session, self.url, self.max_tokens, self.stats)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a test asserts on these: keep them, do not stop
                self.stats.errors.append(f"{type(exc).__name__}: {exc}")
                await asyncio.sleep(0.5)

    def start(self) -> Load:
        self._thread.start()
        self._ready.wait(10)
        return self

    def stop(self) -> LoadStats:
        if self._stop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=30)
        return self.stats

    def __enter__(self) -> Load:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
