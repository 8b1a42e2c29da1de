"""The Textual app: one worker thread pulls frames from a feed, the screens draw the latest View.

Data flows down: the worker gets a Frame (blocking on the network or a
replay's clock, never on the event loop), the app turns it into an immutable
View and hands it to the screens. Keys flow up as actions.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from textual.app import App
from textual.binding import Binding
from textual.timer import Timer
from textual.worker import get_current_worker

from monitor.core.errors import HeadroomError
from monitor.core.paths import new_state_path
from monitor.tui import fmt
from monitor.tui.feeds import Feed, Frame, ReplayFeed
from monitor.tui.screens import (
    DataScreen,
    HelpScreen,
    MainScreen,
    SweepScreen,
)
from monitor.tui.sweep import SweepLauncher, SweepState, read_sweep
from monitor.tui.view import View

HISTORY = 300  # reports kept for sparklines: five minutes at 1 s


class ScenarioControl(Protocol):
    """What the demo gives the app to switch the simulator's scenario."""

    names: Sequence[str]
    current: str

    def set(self, name: str) -> None:
        """Switch (may block on HTTP: the app calls it from a worker)."""


class HeadroomApp(App[int]):
    CSS_PATH = "headroom.tcss"
    TITLE = "headroom"
    ENABLE_COMMAND_PALETTE = False

    # The footer shows these in order and cuts what does not fit (80 columns): help first.
    BINDINGS = [
        Binding("question_mark", "help", "Help"),
        Binding("q", "quit", "Quit"),
        Binding("s", "next_scenario", "Scenario"),
        # p on a focused engine panel profiles it; anywhere else p pauses, as space does.
        Binding("p", "pause_or_profile", "Pause"),
        # The same key, named for what it does now: paused, the footer says Resume.
        Binding("p", "resume_or_profile", "Resume"),
        Binding("space", "pause", "Pause", show=False),
        Binding("r", "record", "Record"),
        Binding("w", "sweep", "Sweep"),
        Binding("tab", "app.focus_next", "Panel", show=False),
        Binding("shift+tab", "app.focus_previous", "Panel", show=False),
        Binding("plus,equals_sign", "faster", "Faster", show=False),
        Binding("minus", "slower", "Slower", show=False),
        Binding("W", "toggle_sweep", "Start/stop sweep", show=False),
        *[
            Binding(str(i % 10), f"pick_scenario({i})", f"scenario {i}", show=False)
            for i in range(1, 11)
        ],
    ]

    def __init__(
        self,
        feed: Feed,
        *,
        scenarios: ScenarioControl | None = None,
        record_path: str | Path | None = None,
        autostart: bool = True,
        preload: int = 0,
        sweep_path: str | Path | None = None,
        sweep_launcher: SweepLauncher | None = None,
        title: str = "headroom",
    ) -> None:
        super().__init__()
        self.feed = feed
        self.scenarios = scenarios
        self.record_path = Path(record_path) if record_path else None
        self.autostart = autostart
        self.preload = preload
        self.sweep_path = sweep_path
        self.sweep_state: SweepState | None = None
        self.sweep_launcher = sweep_launcher
        self._sweep_timer: Timer | None = None
        self.title = title
        self.view = View()
        self.paused = False
        self.frames_seen = 0
        self.replay_done = False
        self._history: collections.deque = collections.deque(maxlen=HISTORY)
        self._columns = fmt.ColumnCache()
        self._latest: Frame | None = None
        self._feed_error: str | None = None
        self._stop = threading.Event()
        self._steady = fmt.Steady()

    # Data in -------------------------------------------------------------------------------

    def on_mount(self) -> None:
        if self.preload and isinstance(self.feed, ReplayFeed):
            for _ in range(self.preload):
                frame = self.feed.step()
                if frame is None:
                    break
                self.apply_frame(frame)
        self._publish()
        self.push_screen(MainScreen())
        if self.sweep_path is not None:
            self._follow_sweep()
        if self.autostart:
            self.feed.start()
            self.run_worker(self._pump, thread=True, exclusive=True, group="feed", name="feed")

    def _pump(self) -> None:
        worker = get_current_worker()
        holds = isinstance(self.feed, ReplayFeed)
        while not self._stop.is_set() and not worker.is_cancelled:
            if self.paused and holds:
                # A paused replay stops advancing; live feeds keep collecting so history has no hole.
                self._stop.wait(0.1)
                continue
            try:
                frame = self.feed.next(self._stop)
            except Exception as exc:  # a feed bug must show, not kill the UI
                frame = Frame(None, error=f"{type(exc).__name__}: {exc}")
                self._stop.wait(1.0)
            while holds and self.paused and not self._stop.is_set():
                self._stop.wait(0.1)  # paused while this frame was on its way: hold it
            if frame is None:
                if isinstance(self.feed, ReplayFeed) and self.feed.finished:
                    self._post(self._replay_finished)
                    return
                continue
            self._post(self.apply_frame, frame, True)

    def _post(self, fn, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        if self._stop.is_set():
            return
        try:
            self.call_from_thread(fn, *args, **kwargs)
        except RuntimeError:
            # The app is shutting down: the event loop no longer takes calls.
            self._stop.set()

    def apply_frame(self, frame: Frame, publish: bool = False) -> None:
        self.frames_seen += 1
        if frame.report is None:
            self._feed_error = frame.error
        else:
            self._feed_error = None
            self._history.append(frame.report)
            self._latest = frame
        # Paused: keep collecting (history stays whole) but leave the screen as it was.
        if publish and not self.paused:
            self._publish()

    def _publish(self) -> None:
        latest = self._latest
        self.view = View(
            report=latest.report if latest else None,
            history=tuple(self._history),
            feed_error=self._feed_error,
            position=latest.position if latest else None,
            column_cache=self._columns,
        )
        screen = self.screen
        if isinstance(screen, DataScreen):
            screen.redraw()

    def _replay_finished(self) -> None:
        self.replay_done = True
        self._publish()
        self.notify("End of the recording", title="replay")

    def _follow_sweep(self) -> None:
        self._refresh_sweep()
        if self._sweep_timer is None:
            self._sweep_timer = self.set_interval(1.0, self._refresh_sweep)

    def _refresh_sweep(self) -> None:
        assert self.sweep_path is not None
        self.run_worker(self._read_sweep, thread=True, exclusive=True, group="sweep")

    def _read_sweep(self) -> None:
        state = read_sweep(self.sweep_path)  # type: ignore[arg-type]
        self._post(self._set_sweep, state)

    def _set_sweep(self, state: SweepState) -> None:
        self.sweep_state = state
        if isinstance(self.screen, SweepScreen):
            # redraw, not update_view: a sweep screen just pushed may not be composed yet.
            self.screen.redraw()

    # What the status bar says ---------------------------------------------------------------

    def status_line(self, width: int | None = None) -> str:
        """Where the data come from and when; cut to ``width`` by dropping the least
        urgent parts whole (the clock and window stay, the feed's name goes first)."""
        rep = self.view.report
        parts: list[tuple[int, str]] = []  # (rank, text)
        if rep:
            # First: it changes every tick, and a change repaints the line from its left end.
            parts.append((5, fmt.clock(rep.get("time"))))
        parts += [(1, self.title), (9, self.feed.label)]
        if self.paused:
            parts.append((0, "PAUSED (p)"))
        rec = self.feed.recorder
        if rec is not None and not rec.closed:
            parts.append((0, f"REC {rec.path.name} ({rec.lines})"))
        if self.view.feed_error:
            parts.append((0, f"! {self.view.feed_error}"))
        if self.scenarios is not None:
            parts.append((2, f"scenario {self.scenarios.current}"))
            parts.append((8, "(s: next, ?: list)"))
        if self.view.position:
            i, n = self.view.position
            parts.append((3, f"tick {i + 1}/{n}" + (" END" if self.replay_done else "")))
        parts.append((7, self.feed.pace()))
        if rep:
            # The window's span wanders by a fraction of a tick: 10 and 11 s in turn otherwise.
            window = self._steady("window", rep.get("window_s") or 0.0, 1.0)
            parts.append((4, f"window {window:.0f} s"))

        def joined(ps: list[tuple[int, str]]) -> str:
            return " · ".join(text for _, text in ps)

        if width is not None:
            # The bar's padding takes two columns.
            while len(joined(parts)) > width - 2 and len(parts) > 1:
                worst = max(range(len(parts)), key=lambda k: parts[k][0])
                parts.pop(worst)
        return joined(parts)

    # Actions -----------------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("next_scenario", "pick_scenario"):
            return self.scenarios is not None
        if action == "pause_or_profile":
            return not self.paused
        if action == "resume_or_profile":
            return self.paused
        return True

    def action_pause_or_profile(self) -> None:
        from monitor.tui.widgets import EnginePanel

        if isinstance(self.screen, MainScreen) and isinstance(self.screen.focused, EnginePanel):
            self.action_profile()
        else:
            self.action_pause()

    def action_resume_or_profile(self) -> None:
        self.action_pause_or_profile()

    def action_pause(self) -> None:
        self.paused = not self.paused
        self.refresh_bindings()  # the footer's p: Pause or Resume
        self._publish()

    def action_profile(self) -> None:
        """Profile the engine's hot thread now, in a worker: py-spy blocks for its seconds."""
        profile = getattr(self.feed, "profile", None)
        if profile is None:
            self.notify("this feed cannot profile", severity="warning")
            return
        self.notify("profiling the engine's hot thread...", title="profile", timeout=3)

        def work() -> None:
            try:
                prof = profile()
            except HeadroomError as exc:
                self._post(self.notify, str(exc), title="profile refused", severity="error")
                return
            name = prof.get("thread") or f"thread {prof.get('tid')}"
            top = (prof.get("functions") or [{}])[0]
            self._post(
                self.notify,
                f"{name}: {100 * top.get('self_share', 0):.0f}% in {top.get('function', '?')}",
                title="profile",
            )

        self.run_worker(work, thread=True, group="profile", exclusive=True)

    def action_faster(self) -> None:
        self.notify(f"now {self.feed.faster()}", timeout=2)
        self._publish()

    def action_slower(self) -> None:
        self.notify(f"now {self.feed.slower()}", timeout=2)
        self._publish()

    def action_record(self) -> None:
        if self.feed.recorder is not None:
            rec = self.feed.recorder
            self.feed.stop_recording()
            self.notify(f"Recorded {rec.lines} ticks to {rec.path}", title="recording stopped")
        else:
            try:
                path = self.record_path or new_state_path("recordings", "headroom", ".jsonl")
                self.feed.start_recording(path)
            except (HeadroomError, OSError) as exc:
                self.notify(str(exc), severity="error")
                return
            self.notify(f"Recording to {path}", title="recording")
        self._publish()

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def action_sweep(self) -> None:
        if not isinstance(self.screen, SweepScreen):
            self.push_screen(SweepScreen())

    def action_toggle_sweep(self) -> None:
        launcher = self.sweep_launcher
        if launcher is None:
            self.notify(
                "Start one with `headroom sweep ... --out DIR`, and watch with --sweep DIR",
                title="no sweep launcher here",
            )
            return
        if launcher.running:
            launcher.stop()
            self.notify("Sweep stopped", title="sweep")
            return
        try:
            self.sweep_path = launcher.start()
        except OSError as exc:
            self.notify(f"could not start the sweep: {exc}", severity="error")
            return
        self.notify(f"Sweep started, writing to {self.sweep_path}", title="sweep")
        self._follow_sweep()
        self.action_sweep()

    def action_next_scenario(self) -> None:
        ctl = self.scenarios
        if ctl is None or not ctl.names:
            return
        names = list(ctl.names)
        i = names.index(ctl.current) if ctl.current in names else -1
        self._switch_scenario(names[(i + 1) % len(names)])

    def action_pick_scenario(self, n: int) -> None:
        ctl = self.scenarios
        if ctl is None:
            return
        if 1 <= n <= len(ctl.names):
            self._switch_scenario(list(ctl.names)[n - 1])

    def _switch_scenario(self, name: str) -> None:
        ctl = self.scenarios
        assert ctl is not None

        def work() -> None:
            try:
                ctl.set(name)
            except Exception as exc:
                self._post(self.notify, f"could not switch to {name}: {exc}", severity="error")
                return
            k = list(ctl.names).index(name) + 1 if name in ctl.names else 0
            self._post(self.notify, f"scenario {k % 10}: {name}", timeout=3)
            self._post(self._publish)

        self.run_worker(work, thread=True, group="scenario")

    async def action_quit(self) -> None:
        self._stop.set()
        self.exit(0)

    def on_unmount(self) -> None:
        self._stop.set()
        if self.sweep_launcher is not None:
            self.sweep_launcher.stop()
        self.feed.close()
