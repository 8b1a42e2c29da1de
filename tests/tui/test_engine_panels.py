"""The engine panels: why a figure is a dash (unknown is not 0), and several engines summed."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from http_support import serving_handler
from tui_helpers import visible, wait_frames

from monitor.read.sampler import Sampler
from monitor.sources.vllm import VllmSource
from monitor.tui.app import HeadroomApp
from monitor.tui.feeds import LocalFeed
from monitor.watch.pipeline import Monitor

pytestmark = pytest.mark.anyio
ENGINES = Path(__file__).resolve().parents[1] / "fixtures" / "engines"


class _Page(BaseHTTPRequestHandler):
    page = b""

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(self.page)))
        self.end_headers()
        self.wfile.write(self.page)

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def serving(fixture: str) -> Iterator[str]:
    handler = type("Page", (_Page,), {"page": (ENGINES / fixture).read_bytes()})
    with serving_handler(handler) as url:
        yield url


async def screen_of(url: str) -> str:
    sampler = Sampler([VllmSource(url)], interval=0.25)
    app = HeadroomApp(LocalFeed(Monitor(sampler, window_s=2.0)))
    async with app.run_test(size=(110, 40)) as pilot:
        await wait_frames(app, pilot, 3)
        await pilot.pause()
        text = visible(app)
        await pilot.press("q")
    return text


async def test_tgi_panel_says_it_exports_no_kv_gauge() -> None:
    with serving("tgi-2.4.txt") as url:
        text = await screen_of(url)
    assert "KV -: TGI 1.0-3.x exports no KV gauge" in text
    assert "· TGI 1.0-3.x" in text  # the panel's title names the engine read


async def test_data_parallel_ranks_are_summed() -> None:
    with serving("vllm-0.11-dp2.txt") as url:
        text = await screen_of(url)
    assert "all 2 engines: running 16.0 · waiting 8.0" in text
    assert "llama-70b · engine 0" in text and "llama-70b · engine 1" in text
