"""The fleet screen: every host's cause from Prometheus, ranked by wasted GPU, with drill-down.

A worker thread reads the fleet (a handful of PromQL queries) every few seconds and hands
the app an immutable Fleet; a failed read keeps the last fleet on screen and says why in the
status line. Enter on a host opens its GPUs, engines and verdicts; Escape comes back.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.css.query import NoMatches
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static

from monitor.core.errors import HeadroomError
from monitor.fleet.model import Fleet, FleetHost
from monitor.fleet.render import count, host_age, host_cells, money, num, pct, watts

COLUMNS = ("host", "GPUs", "wasted", "cause", "conf", "duty", "SM", "run", "wait", "KV", "spare/s",
           "$/hour", "power")  # fmt: skip


def _clock(t: float | None) -> str:
    return "-" if t is None else time.strftime("%H:%M:%S", time.localtime(t))


class FleetStatus(Static):
    """One line on top: the source, the fleet in numbers, when it was read, any error."""


class FleetScreen(Screen):
    BINDINGS = [Binding("enter", "open", "Host", show=True)]

    def compose(self) -> ComposeResult:
        yield FleetStatus(id="fleet-status")
        yield DataTable(id="hosts", cursor_type="row", zebra_stripes=True)
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        for name in COLUMNS:
            table.add_column(name, key=name)
        self.redraw()

    def on_screen_resume(self) -> None:
        self.redraw()

    def redraw(self) -> None:
        app: FleetApp = self.app  # type: ignore[assignment]
        try:
            status = self.query_one(FleetStatus)
            table = self.query_one(DataTable)
        except NoMatches:
            return
        status.update(app.status_line())
        fleet = app.fleet
        if fleet is None:
            return
        keep = self.selected()
        table.clear()
        for h in fleet.hosts:
            table.add_row(
                Text(
                    h.instance + (" (stale)" if h.stale else ""), style="dim" if h.stale else ""
                ),  # fmt: skip
                str(len(h.gpus)),
                *host_cells(h),
                num(h.spare_rps, 2),
                money(h.wasted_cost_per_hour),
                watts(h.power_watts),
                key=h.instance,
            )
        if keep is not None and fleet.host(keep) is not None:
            table.move_cursor(row=table.get_row_index(keep))

    def selected(self) -> str | None:
        table = self.query_one(DataTable)
        if not table.row_count:
            return None
        key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key
        return None if key.value is None else str(key.value)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.row_key.value is not None:
            self.app.push_screen(HostScreen(str(event.row_key.value)))

    def action_open(self) -> None:
        instance = self.selected()
        if instance is not None:
            self.app.push_screen(HostScreen(instance))


def host_text(h: FleetHost | None, instance: str) -> Text:
    text = Text()
    if h is None:
        text.append(f"{instance} is no longer in the fleet's answer.\n", style="bold")
        return text
    top = h.verdict
    text.append(h.instance, style="bold")
    if top is not None:
        text.append(f"  {top.cause}", style="bold yellow")
        text.append(f" ({num(top.confidence, 2)})")
    text.append(f"\n{count(len(h.gpus), 'GPU')}, wasted {count(num(h.wasted), 'GPU')}")
    if h.wasted_cost_per_hour is not None:
        text.append(f" ({money(h.wasted_cost_per_hour)} an hour)")
    if h.power_watts is not None:
        text.append(f", drawing {watts(h.power_watts)}")
    text.append(f"; {host_age(h)}")
    if h.stale:
        text.append("  STALE", style="bold red")
    text.append("\n\nGPUs\n", style="bold underline")
    text.append(f"{'gpu':<4} {'model':<24} {'duty':>5} {'SM':>5} {'wasted':>6}  verdict\n",
                style="bold")  # fmt: skip
    for g in h.gpus:
        v = h.verdict_for(f"gpu:{g.gpu}")
        text.append(f"{g.gpu:<4} {g.model[:24]:<24} {pct(g.util):>5} {pct(g.sm_active):>5} "
                    f"{num(g.wasted, 2):>6}  {f'{v.cause} ({num(v.confidence, 2)})' if v else ''}\n")  # fmt: skip
    if not h.gpus:
        text.append("no GPU series\n", style="dim")
    text.append("\nEngines\n", style="bold underline")
    text.append(f"{'model/engine':<28} {'run':>6} {'wait':>6} {'KV':>5}  {'headroom':<14} {'spare/s':>7}  verdict\n",
                style="bold")  # fmt: skip
    for e in h.engines:
        v = h.verdict_for(e.scope)
        room = "-" if e.headroom_factor is None else f"{e.headroom_factor:.1f}x"
        if e.first_limit:
            room += f" {e.first_limit}"
        text.append(f"{(e.model_name + '/' + e.engine)[:28]:<28} {num(e.running):>6} "
                    f"{num(e.waiting):>6} {pct(e.kv_cache_usage):>5}  {room:<14} {num(e.spare_rps, 2):>7}  "
                    f"{f'{v.cause} ({num(v.confidence, 2)})' if v else ''}\n")  # fmt: skip
        text.append(f"  {e.url}\n", style="dim")
    if not h.engines:
        text.append("no engine series\n", style="dim")
    text.append("\nVerdicts\n", style="bold underline")
    for v in h.verdicts:
        text.append(f"{v.cause:<14} {num(v.confidence, 2):>4}  {v.scope}\n")
    if not h.verdicts:
        text.append("no current verdict\n", style="dim")
    return text


class HostScreen(Screen):
    BINDINGS = [
        Binding("escape", "app.pop_screen", "Back"),
        Binding("backspace", "app.pop_screen", "Back", show=False),
    ]

    def __init__(self, instance: str) -> None:
        super().__init__()
        self.instance = instance

    def compose(self) -> ComposeResult:
        yield FleetStatus(id="fleet-status")
        with VerticalScroll(id="host-scroll"):
            yield Static(id="host-detail")
        yield Footer()

    def on_mount(self) -> None:
        self.redraw()

    def redraw(self) -> None:
        app: FleetApp = self.app  # type: ignore[assignment]
        try:
            self.query_one(FleetStatus).update(app.status_line())
            body = self.query_one("#host-detail", Static)
        except NoMatches:
            return
        fleet = app.fleet
        body.update(host_text(fleet.host(self.instance) if fleet else None, self.instance))


class FleetApp(App[int]):
    TITLE = "headroom fleet"
    ENABLE_COMMAND_PALETTE = False
    CSS = """
    FleetStatus { height: 1; background: $primary-background; text-style: bold; padding: 0 1; }
    #hosts { height: 1fr; }
    #host-scroll { height: 1fr; padding: 0 1; }
    """
    BINDINGS = [
        Binding("q", "quit", "Quit"),
        Binding("r", "refresh", "Refresh"),
    ]

    def __init__(
        self,
        read: Callable[[], Fleet],
        every: float = 15.0,
        autostart: bool = True,
        source: str = "",
    ) -> None:
        super().__init__()
        self.read = read
        self.every = every
        self.autostart = autostart
        self.source = source
        self.fleet: Fleet | None = None
        self.error: str | None = None
        self.reads = 0
        self._stop = threading.Event()
        self._wake = threading.Event()

    def on_mount(self) -> None:
        self.push_screen(FleetScreen())
        if self.autostart:
            self.run_worker(self._poll, thread=True, exclusive=True, group="fleet")
        else:
            self._apply(*self._read_once())

    def _read_once(self) -> tuple[Fleet | None, str | None]:
        try:
            return self.read(), None
        except HeadroomError as exc:
            return None, str(exc)

    def _poll(self) -> None:
        while not self._stop.is_set():
            fleet, error = self._read_once()
            try:
                self.call_from_thread(self._apply, fleet, error)
            except RuntimeError:
                return  # the app is shutting down
            self._wake.wait(self.every)
            self._wake.clear()

    def _apply(self, fleet: Fleet | None, error: str | None) -> None:
        self.reads += 1
        self.error = error
        if fleet is not None:
            self.fleet = fleet
        screen = self.screen
        if isinstance(screen, (FleetScreen, HostScreen)):
            screen.redraw()

    def status_line(self) -> str:
        where = self.source or (self.fleet.source if self.fleet else "")
        if self.error:
            kept = " (showing the last answer)" if self.fleet else ""
            return f"{where}: {self.error}{kept}"
        if self.fleet is None:
            return f"{where}: reading..."
        f = self.fleet
        stale = sum(1 for h in f.hosts if h.stale)
        return (
            f"{where}  {count(len(f.hosts), 'host')}, {count(f.gpu_count, 'GPU')}, "
            f"{count(num(f.wasted), 'GPU')} wasted"
            + (
                f" ({money(f.wasted_cost_per_hour)} an hour)"
                if f.gpu_hour_price is not None
                else ""
            )
            + (f", {num(f.spare_rps, 2)} req/s spare" if f.spare_rps is not None else "")
            + (f", {stale} stale" if stale else "")
            + f"  at {_clock(f.time)}  enter: a host"
        )

    def action_refresh(self) -> None:
        self._wake.set()

    def on_unmount(self) -> None:
        self._stop.set()
        self._wake.set()
