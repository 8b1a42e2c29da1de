"""The app driven by Textual's pilot: every key and screen, remote and local feeds, errors in place."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from http_support import serving_handler
from tui_helpers import record_story, visible, wait_frames
from tui_synthetic import snapshots

from monitor.read.sampler import Sampler
from monitor.sources.base import Reading
from monitor.sources.samples import SourceError
from monitor.tui.app import HeadroomApp
from monitor.tui.feeds import LocalFeed, RemoteFeed, ReplayFeed
from monitor.tui.fmt import cause_headline, cause_label
from monitor.tui.screens import (
    EngineDetailScreen,
    GpuDetailScreen,
    HelpScreen,
    MainScreen,
    SweepScreen,
)
from monitor.tui.widgets import DiagnosisPanel, EnginePanel, GpuPanel
from monitor.watch.pipeline import Monitor

pytestmark = pytest.mark.anyio
SWEEP_FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "sweeps" / "cpu-bound"


def lead_cause(app: HeadroomApp) -> str:
    """The first verdict's label as the diagnosis panel prints it."""
    assert app.view.report is not None and app.view.report["verdicts"]
    return cause_label(app.view.report["verdicts"][0]["cause"]).upper()


@pytest.fixture
def seq_cap(tmp_path: Path) -> Path:
    path = tmp_path / "seq-cap.jsonl"
    record_story(path, "seq-cap")
    return path


def paused_app(path: Path, **kw: object) -> HeadroomApp:
    return HeadroomApp(ReplayFeed(path, speed=0), autostart=False, preload=1000, **kw)  # type: ignore[arg-type]


async def test_main_screen_shows_cause_gpu_engine_and_host(seq_cap: Path) -> None:
    app = paused_app(seq_cap)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        assert isinstance(app.screen, MainScreen)
        text = visible(app)
        assert lead_cause(app) in text
        assert cause_headline(app.view.report["verdicts"][0]["cause"]) in text  # type: ignore[index]
        assert "GPU 0 · NVIDIA H200" in text
        assert "64/64" in text  # running against the inferred cap
        assert "tick 12/12" in text


async def test_fits_80x24_with_cause_and_gpu_visible(seq_cap: Path) -> None:
    app = paused_app(seq_cap)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        text = visible(app)
        lines = text.splitlines()
        assert len(lines) == 24 and all(len(line) <= 80 for line in lines)
        assert lead_cause(app) in text and "GPU 0" in text and "duty" in text


async def test_help_and_every_screen_key(seq_cap: Path, tmp_path: Path) -> None:
    # A real sweep's files (loadgen against the simulator's cpu-bound scenario).
    sweep_dir = SWEEP_FIXTURE
    app = paused_app(seq_cap, sweep_path=sweep_dir)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        assert "start or stop recording" in visible(app)
        await pilot.press("escape")
        assert isinstance(app.screen, MainScreen)

        # tab walks the panels; enter on the GPU panel opens its detail.
        await pilot.press("tab")
        assert isinstance(app.focused, DiagnosisPanel)
        await pilot.press("tab")
        assert isinstance(app.focused, GpuPanel)
        await pilot.press("enter")
        assert isinstance(app.screen, GpuDetailScreen)
        await pilot.pause()
        assert "duty - SM active: 10 points" in visible(app)
        await pilot.press("escape")
        await pilot.press("tab")
        assert isinstance(app.focused, EnginePanel)
        await pilot.press("enter")
        assert isinstance(app.screen, EngineDetailScreen)
        await pilot.pause()
        text = visible(app)
        assert "waiting by reason" in text and "capacity 40.0" in text
        await pilot.press("escape")

        await pilot.press("g")
        assert isinstance(app.screen, GpuDetailScreen)
        await pilot.press("escape")
        await pilot.press("e")
        assert isinstance(app.screen, EngineDetailScreen)
        await pilot.press("escape")

        await pilot.press("w")
        assert isinstance(app.screen, SweepScreen)
        await pilot.pause(0.5)
        await pilot.pause()
        text = visible(app)
        assert "saturation: at 224" in text and "cause token-cap" in text
        assert "throughput (output tok/s) vs load" in text
        # An invalid step says so on its row and why, whole, under it.
        assert "INVALID: this machine froze 1.5 s during the hold" in text
        await pilot.press("escape")
        assert isinstance(app.screen, MainScreen)

        await pilot.press("q")
    assert app.return_code == 0


async def test_pause_stops_a_replay_and_resume_continues(seq_cap: Path) -> None:
    feed = ReplayFeed(seq_cap, speed=1.0)
    app = HeadroomApp(feed)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_frames(app, pilot, 2)
        await pilot.press("p")
        assert app.paused and "PAUSED" in visible(app)
        # Let any frame already in flight land, then check the replay holds still.
        await pilot.pause(0.3)
        seen = app.frames_seen
        await pilot.pause(2.5)
        assert app.frames_seen == seen
        await pilot.press("p")
        deadline = time.monotonic() + 20
        while app.frames_seen == seen and time.monotonic() < deadline:
            await pilot.pause(0.1)
        assert app.frames_seen > seen


async def test_the_footer_says_resume_while_paused(seq_cap: Path) -> None:
    app = paused_app(seq_cap)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        footer = visible(app).splitlines()[-1]
        assert "p Pause" in footer and "Resume" not in footer
        await pilot.press("p")
        await pilot.pause()
        screen = visible(app)
        assert app.paused and "PAUSED (p)" in screen
        footer = screen.splitlines()[-1]
        assert "p Resume" in footer and "Pause" not in footer
        await pilot.press("p")  # the key still resumes
        await pilot.pause()
        assert not app.paused and "p Pause" in visible(app).splitlines()[-1]


async def test_plus_and_minus_change_replay_speed(seq_cap: Path) -> None:
    feed = ReplayFeed(seq_cap, speed=1.0)
    app = HeadroomApp(feed, autostart=False, preload=3)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("plus")
        assert feed.speed == 2.0
        await pilot.pause()
        assert "2x speed" in visible(app)
        await pilot.press("minus", "minus")
        assert feed.speed == 0.5


async def test_r_records_and_the_recording_replays(seq_cap: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    feed = ReplayFeed(seq_cap, speed=4)
    app = HeadroomApp(feed, record_path=out)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("r")
        assert feed.recorder is not None
        await pilot.pause()
        assert "REC out.jsonl" in visible(app)
        deadline = time.monotonic() + 20
        while not app.replay_done and time.monotonic() < deadline:
            await pilot.pause(0.1)
        await pilot.press("r")
        assert feed.recorder is None
    lines = out.read_text().splitlines()
    assert json.loads(lines[0])["headroom_recording"] == 1
    assert len(lines) > 1


class FakeScenarios:
    def __init__(self) -> None:
        self.names = ("starved", "seq-cap", "cpu-bound")
        self.current = "starved"
        self.calls: list[str] = []

    def set(self, name: str) -> None:
        self.calls.append(name)
        self.current = name


async def test_scenario_keys_switch_in_a_worker(seq_cap: Path) -> None:
    ctl = FakeScenarios()
    app = paused_app(seq_cap, scenarios=ctl)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("s")
        await app.workers.wait_for_complete()
        assert ctl.calls == ["seq-cap"]
        await pilot.press("3")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert ctl.calls == ["seq-cap", "cpu-bound"]
        assert "scenario cpu-bound" in visible(app)


async def test_scenario_keys_do_nothing_outside_the_demo(seq_cap: Path) -> None:
    app = paused_app(seq_cap)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("s", "1")
        assert isinstance(app.screen, MainScreen)
        assert "Scenario" not in visible(app).splitlines()[-1]


async def test_a_failing_source_shows_in_place_and_the_rest_updates(tmp_path: Path) -> None:
    path = tmp_path / "err.jsonl"
    err = SourceError("dcgm-exporter", "http://127.0.0.1:9400/metrics", "connection refused")
    record_story(path, "starved", errors=(err,))
    app = paused_app(path)
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.pause()
        text = visible(app)
        assert "! dcgm-exporter 127.0.0.1:9400: connection refused" in text
        assert "llama-8b · engine 0" in text and "GPU 0 ·" in text
        assert lead_cause(app) in text


class _Agent(BaseHTTPRequestHandler):
    report: dict = {}
    delay = 0.0

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        time.sleep(self.delay)
        body = json.dumps(self.report).encode()
        self.send_response(200 if self.path == "/api/v1/snapshot" else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the app quit mid-answer

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def agent(seq_cap: Path) -> Iterator[tuple[str, type[_Agent]]]:
    feed = ReplayFeed(seq_cap, speed=0)
    report = None
    while (f := feed.step()) is not None:
        report = f.report
    feed.close()
    handler = type("Agent", (_Agent,), {"report": json.loads(json.dumps(_thaw(report)))})
    with serving_handler(handler) as url:
        yield url, handler


def _thaw(obj: object) -> object:
    from collections.abc import Mapping

    if isinstance(obj, Mapping):
        return {k: _thaw(v) for k, v in obj.items()}
    if isinstance(obj, tuple):
        return [_thaw(v) for v in obj]
    return obj


async def wait_for(pilot, cond, timeout: float = 20.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not cond() and time.monotonic() < deadline:
        await pilot.pause(0.1)
    assert cond()


async def test_remote_mode_reads_the_agent(agent: tuple[str, type[_Agent]]) -> None:
    url, _ = agent
    app = HeadroomApp(RemoteFeed(url, interval=0.5))
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: app.view.report is not None)
        await pilot.pause()
        text = visible(app)
        assert lead_cause(app) in text and f"agent {url}" in text


async def test_a_slow_agent_never_blocks_the_keys(agent: tuple[str, type[_Agent]]) -> None:
    url, handler = agent
    handler.delay = 5.0
    app = HeadroomApp(RemoteFeed(url, interval=0.5, timeout=20.0))
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        # The first answer is still on its way: the key was handled without waiting for it.
        assert app.view.report is None
        await pilot.press("escape")
        assert isinstance(app.screen, MainScreen)
        assert app.view.report is None
        await wait_for(pilot, lambda: app.view.report is not None)


async def test_an_unreachable_agent_is_shown_not_fatal() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    app = HeadroomApp(RemoteFeed(f"http://127.0.0.1:{port}", interval=0.5, timeout=1.0))
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: app.view.feed_error is not None)
        await pilot.pause()
        assert "ConnectError" in visible(app)
        await pilot.press("q")
    assert app.return_code == 0


class StorySource:
    """A source that replays the hand-made story's readings one per tick."""

    name = "story"

    def __init__(self) -> None:
        self.snaps = snapshots("starved", 200)
        self.i = 0

    def read(self) -> Reading:
        snap = self.snaps[min(self.i, len(self.snaps) - 1)]
        self.i += 1
        return Reading(gpus=snap.gpus, engines=snap.engines, host=snap.host)

    def close(self) -> None:
        pass


async def test_local_mode_samples_in_a_thread_and_updates(tmp_path: Path) -> None:
    sampler = Sampler([StorySource()], interval=0.25)
    feed = LocalFeed(Monitor(sampler, window_s=2.0))
    app = HeadroomApp(feed)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: app.frames_seen >= 3)
        await pilot.pause()
        assert "GPU 0" in visible(app)
        await pilot.press("minus")
        assert sampler.interval == 0.5
        await pilot.press("q")
    # Quitting stopped the sampler thread.
    assert sampler._thread is None


FAKE_SWEEP = """
import json, sys, time, pathlib
out = pathlib.Path(sys.argv[1])
with (out / "steps.jsonl").open("a") as fh:
    for i, c in enumerate([1, 2, 4, 8]):
        step = {"index": i, "mode": "closed", "concurrency": c, "requests_per_s": c * 0.5,
                "output_tokens_per_s": c * 64.0, "e2e_p50_s": 2.0, "verdict": "starved"}
        fh.write(json.dumps(step) + "\\n")
        fh.flush()
        time.sleep(0.3)
time.sleep(60)
"""


async def test_shift_w_starts_and_stops_a_sweep_and_the_view_follows_it(
    seq_cap: Path, tmp_path: Path
) -> None:
    import sys

    from monitor.tui.sweep import SweepLauncher

    launcher = SweepLauncher([sys.executable, "-c", FAKE_SWEEP, "{out}"], tmp_path / "sw")
    app = paused_app(seq_cap, sweep_launcher=launcher)
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.press("W")
        assert launcher.running
        assert isinstance(app.screen, SweepScreen)
        await wait_for(
            pilot, lambda: app.sweep_state is not None and len(app.sweep_state.steps) == 4
        )
        await pilot.pause()
        assert "saturation: not found yet" in visible(app)
        await pilot.press("W")
        assert not launcher.running


async def test_a_sweep_reading_that_lands_before_the_sweep_screen_is_drawn_is_kept(
    seq_cap: Path, tmp_path: Path
) -> None:
    """The sweep file is read in a thread: its reading can arrive in the same tick as the
    push of the sweep screen, before that screen has its widgets (this crashed the app)."""
    from monitor.tui.sweep import read_sweep

    out = tmp_path / "sw"
    out.mkdir()
    step = {"index": 0, "mode": "closed", "concurrency": 1, "output_tokens_per_s": 64.0}
    (out / "steps.jsonl").write_text(json.dumps(step) + "\n")
    app = paused_app(seq_cap)
    async with app.run_test(size=(100, 40)) as pilot:
        app.push_screen(SweepScreen())
        app._set_sweep(read_sweep(out))  # same tick: the screen is not composed yet
        await pilot.pause()
        assert isinstance(app.screen, SweepScreen)
        assert len(app.sweep_state.steps) == 1
        assert "saturation" in visible(app)


async def test_a_view_that_draws_the_same_repaints_nothing(
    seq_cap: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over SSH each repaint is bytes on the wire: publishing the same data again must leave
    every panel alone, and a change must repaint only the panel lines that changed."""
    from monitor.tui.widgets import Panel

    calls: list[tuple[str, tuple[object, ...], bool]] = []
    real = Panel.refresh

    def counting(self, *regions, **kw):  # type: ignore[no-untyped-def]
        calls.append((type(self).__name__, regions, bool(kw.get("layout"))))
        return real(self, *regions, **kw)

    app = paused_app(seq_cap)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        app._publish()  # panels drawn before the first layout are drawn again at their width
        await pilot.pause()
        monkeypatch.setattr(Panel, "refresh", counting)
        app._publish()
        await pilot.pause()
        assert calls == []  # the same report again: nothing repainted
        # One figure changes: the engine panel repaints that line alone, no layout pass.
        latest = app._latest
        assert latest is not None and latest.report is not None
        engines = [dict(e) for e in latest.report["engines"]]
        engines[0]["waiting"] = (engines[0].get("waiting") or 0) + 7
        report = {**latest.report, "engines": engines}
        app._latest = dataclasses.replace(latest, report=report)
        app._publish()
        await pilot.pause()
        engine = [c for c in calls if c[0] == "EnginePanel"]
        assert engine and not any(layout for _, _, layout in engine)
        (regions,) = [r for _, r, _ in engine]
        assert 1 <= len(regions) <= 3 and all(r.height == 1 for r in regions)  # type: ignore[attr-defined]


async def sweep_screen(recording: Path, out: Path, steps: list[dict]) -> str:
    """The sweep screen (w) once it has read ``steps``, written where the sweep writes them."""
    (out / "steps.jsonl").write_text("".join(json.dumps(s) + "\n" for s in steps))
    app = paused_app(recording, sweep_path=out)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("w")
        await wait_for(pilot, lambda: app.sweep_state is not None and app.sweep_state.steps)
        await pilot.pause()
        return visible(app)


def _demo_step(i: int, c: int, done: int, **kw: object) -> dict:
    """A step as the demo's sweep writes it on the seq-cap box, its load already queued."""
    none = done == 0
    return {"index": i, "mode": "closed", "concurrency": c, "requests_completed": done,
            "requests_failed": 0, "requests_per_s": done / 5, "output_tokens_per_s": 64.0 * done / 5,
            "e2e_p50_s": None if none else 24.0, "running_mean": 8.0, "waiting_mean": 24.0 + c,
            "verdict": "seq-cap", "valid": not none,
            "invalid_reason": "nothing came back in the hold" if none else None, **kw}  # fmt: skip


async def test_the_sweep_screen_on_a_box_saturated_before_it_says_so_and_plots_no_empty_step(
    seq_cap: Path, tmp_path: Path
) -> None:
    """Mid-run on the seq-cap demo box: a warning first, the steps that finished nothing
    flagged and left out of the plots, one load's axis read once (it read "64 ... 64")
    and no "(no steps yet)" under a table of steps."""
    out = tmp_path / "sw"
    out.mkdir()
    steps = [_demo_step(i, c, 0) for i, c in enumerate([1, 2, 4])] + [_demo_step(3, 64, 3)]
    summary = "the box is already saturated by other traffic: 8 running, 24 waiting"
    (out / "before.json").write_text(json.dumps({"saturated": True, "summary": summary}))
    text = await sweep_screen(seq_cap, out, steps)
    assert "warning: the box is already saturated by other traffic: 8 running, 24 waiting" in text
    assert text.index("warning:") < text.index("step    load")
    assert "(no steps yet)" not in text
    assert text.count("INVALID") == 3 and text.count("nothing came back in the hold") == 3
    axis = [line.strip() for line in text.splitlines() if line.strip().startswith("64")]
    assert axis and all(line == "64 (one load)" for line in axis), axis
    # The throughput plot holds one point (the step at 64); the three empty steps are not zeros.
    plot = text.split("throughput (output tok/s) vs load")[1].split("latency (e2e p50")[0]
    assert plot.count("*") + plot.count("S") == 1, plot


async def test_a_load_measured_again_after_a_freeze_is_one_point_in_the_sweep_plots(
    seq_cap: Path, tmp_path: Path
) -> None:
    """The demo's starved box: the machine froze during the step at 8, which was measured
    again; the plot drew both (two stars at 8, 796 and 999 tok/s), not the one the
    saturation reads."""
    out = tmp_path / "sw"
    out.mkdir()
    steps = [_demo_step(0, 1, 10), _demo_step(1, 2, 20),
             _demo_step(2, 8, 63, valid=False, stalled=True, output_tokens_per_s=796.0,
                        invalid_reason="this machine froze 1.1 s during the hold"),
             _demo_step(3, 8, 79, output_tokens_per_s=999.0)]  # fmt: skip
    text = await sweep_screen(seq_cap, out, steps)
    plot = text.split("throughput (output tok/s) vs load")[1].split("latency (e2e p50")[0]
    assert plot.count("*") == 3, plot  # loads 1, 2 and 8
    assert "999" in plot.splitlines()[1], plot  # the top of the plot is the remeasured step
    assert "this machine froze 1.1 s during the hold" in text  # the table keeps both


async def test_a_section_notice_says_so_from_the_first_frames_of_a_started_feed() -> None:
    """A feed started with the app (its first frames drawn while the screen is still being
    mounted): the section without panels says "no engine read" in its place, under the GPU,
    and keeps saying it."""
    h200 = Path(__file__).resolve().parents[1] / "fixtures" / "gpu" / "h200" / "matmul-1s.jsonl"
    app = HeadroomApp(ReplayFeed(h200, speed=8.0))
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_frames(app, pilot, 6)
        await pilot.pause()
        lines = visible(app).splitlines()
        top = next(i for i, line in enumerate(lines) if line.startswith("╭─ GPU 0"))
        end = next(i for i in range(top, len(lines)) if lines[i].startswith("╰"))
        assert lines[end + 1].strip() == "no engine read"
