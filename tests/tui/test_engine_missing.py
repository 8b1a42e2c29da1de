"""The engine panel says why a figure is a dash: unknown is not 0."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from monitor.pipeline import Monitor
from monitor.sampler import Sampler
from monitor.sources.vllm import VllmSource
from monitor.tui.app import HeadroomApp
from monitor.tui.feeds import LocalFeed

pytestmark = pytest.mark.anyio
TGI_PAGE = (
    Path(__file__).resolve().parents[1] / "fixtures" / "engines" / "tgi-2.4.txt"
).read_bytes()


class _Tgi(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(TGI_PAGE)))
        self.end_headers()
        self.wfile.write(TGI_PAGE)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def tgi() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Tgi)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def visible(app: HeadroomApp) -> str:
    lines = []
    for strip in app.screen._compositor.render_strips():  # type: ignore[attr-defined]
        lines.append("".join(seg.text for seg in strip))
    return "\n".join(lines)


async def test_tgi_panel_says_it_exports_no_kv_gauge(tgi: str) -> None:
    sampler = Sampler([VllmSource(tgi)], interval=0.25)
    app = HeadroomApp(LocalFeed(Monitor(sampler, window_s=2.0)))
    async with app.run_test(size=(110, 40)) as pilot:
        deadline = time.monotonic() + 20
        while app.frames_seen < 3 and time.monotonic() < deadline:
            await pilot.pause(0.1)
        await pilot.pause()
        text = visible(app)
        assert "KV -: TGI 1.0-3.x exports no KV gauge" in text
        assert "TGI 1.0-3.x" in text  # the panel's title names the engine read
        await pilot.press("q")
