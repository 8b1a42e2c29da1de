"""Screens: the main overview, a detail screen per GPU and per engine, the sweep view and help."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.css.query import NoMatches
from textual.geometry import Region
from textual.screen import ModalScreen, Screen
from textual.widget import Widget
from textual.widgets import Footer, Static

from monitor.text.whatif import whatif_text
from monitor.tui import fmt
from monitor.tui.sweep import SweepState, chart, load_of
from monitor.tui.tight import tighten
from monitor.tui.view import GPU_SOURCES, View
from monitor.tui.widgets import (
    GAP_NOTICE,
    DiagnosisPanel,
    EnginePanel,
    GpuPanel,
    HostPanel,
    LittlePanel,
    NotesPanel,
    Notice,
    Panel,
    SectionNotice,
    changed_runs,
    gpu_facts,
    littles_lines,
)
from monitor.tui.widgets import (
    meter as _meter,
)
from monitor.watch.report import process_rows, profile_lines


def gap_words(util: float, sm: float, verdict: Mapping[str, Any] | None) -> str:
    """What the gap between duty cycle and SM activity means for this GPU, in a few words.

    The diagnosis's verdict for the GPU decides where there is one; the size of the gap
    alone only says whether kernels fill the SMs they run on.
    """
    if verdict is not None and verdict.get("cause") not in (None, "unknown", "idle"):
        return f"{fmt.cause_label(verdict['cause'])}: see the diagnosis"
    if util - sm < GAP_NOTICE:
        return "small: running kernels keep most SMs busy"
    if util >= 0.95:
        return "large, and busy all the time: kernels too small to fill the SMs"
    return "large, with gaps between kernels: launch-bound"


ENGINE_SOURCES_ALL = ("vllm", "engine", "sglang", "tgi")
WIDE = 150


class StatusBar(Widget):
    """One line on top: where data comes from, how often, and whether paused or recording."""

    DEFAULT_CSS = "StatusBar { height: 1; }"

    def __init__(self, id: str | None = None) -> None:
        super().__init__(id=id)
        self.text = Text()

    def update(self, line: str) -> None:
        # The same line again repaints nothing, and a new one only the cells that changed
        # (the clock's seconds): a layout pass would repaint the whole screen every tick.
        new = Text(line)
        if new == self.text:
            return
        old, self.text = self.text, new
        width = max(1, self.content_size.width)
        if not old.plain or not self.is_mounted:
            self.refresh()
            return
        regions = [Region(x0, 0, x1 - x0, 1) for x0, x1 in changed_runs(old, new, width)]
        if regions:
            self.refresh(*regions)

    def render(self) -> Text:
        return self.text


class DataScreen(Screen):
    """A screen that redraws from the app's View."""

    def __init__(self, name: str | None = None) -> None:
        super().__init__(name=name)
        tighten(self)

    def update_view(self, view: View) -> None:  # pragma: no cover - overridden
        pass

    def status_text(self) -> str:
        return self.app.status_line(self.size.width or None)  # type: ignore[attr-defined]

    def on_mount(self) -> None:
        self.call_after_refresh(self.redraw)

    def on_screen_resume(self) -> None:
        self.redraw()

    def redraw(self) -> None:
        try:
            self.update_view(self.app.view)  # type: ignore[attr-defined]
        except NoMatches:
            pass  # not composed yet: on_mount draws it


class MainScreen(DataScreen):
    BINDINGS = [
        Binding("enter", "detail", "Detail"),
        Binding("g", "gpu_detail", "GPU", show=False),
        Binding("e", "engine_detail", "Engine", show=False),
    ]

    def compose(self) -> ComposeResult:
        yield StatusBar(id="status")
        with VerticalScroll(id="body"):
            yield DiagnosisPanel(id="diagnosis")
            with Vertical(id="hw"):
                with Vertical(id="gpus"):
                    yield SectionNotice(GPU_SOURCES, "no GPU read", id="gpu-notice")
                with Vertical(id="engines"):
                    yield SectionNotice(ENGINE_SOURCES_ALL, "no engine read", id="engine-notice")
            yield LittlePanel(id="little")
            yield HostPanel(id="host")
            yield NotesPanel(id="notes")
        yield Footer()

    def on_resize(self) -> None:
        self.set_class(self.size.width >= WIDE, "-wide")

    def update_view(self, view: View) -> None:
        self.query_one(StatusBar).update(self.status_text())
        self._sync_gpus(view)
        self._sync_engines(view)
        # A walk with a type check, not a CSS query: the query's selector matching was a
        # tenth of a frame's CPU (0.4 ms against 0.01 ms for the screen's 20 widgets).
        for w in self.walk_children():
            if isinstance(w, Panel | Notice):
                w.update_view(view)

    def _sync_gpus(self, view: View) -> None:
        want = [g["index"] for g in view.gpus()]
        _sync_panels(self.query_one("#gpus", Vertical), GpuPanel, want, GpuPanel)

    def _sync_engines(self, view: View) -> None:
        want = [fmt.engine_key(e) for e in view.engines()]
        _sync_panels(self.query_one("#engines", Vertical), EnginePanel, want, EnginePanel)

    def action_detail(self) -> None:
        focused = self.focused
        if isinstance(focused, GpuPanel):
            self.app.push_screen(GpuDetailScreen(focused.index))
        elif isinstance(focused, EnginePanel):
            self.app.push_screen(EngineDetailScreen(focused.key))
        else:
            # Nothing chosen yet (the scrolling body has focus at start): the engine, else the GPU.
            self.action_engine_detail() if self.app.view.engines() else self.action_gpu_detail()  # type: ignore[attr-defined]

    def action_gpu_detail(self) -> None:
        gpus = self.app.view.gpus()  # type: ignore[attr-defined]
        if gpus:
            self.app.push_screen(GpuDetailScreen(gpus[0]["index"]))
        else:
            self.notify("No GPU to show", severity="warning")

    def action_engine_detail(self) -> None:
        engines = self.app.view.engines()  # type: ignore[attr-defined]
        if engines:
            self.app.push_screen(EngineDetailScreen(fmt.engine_key(engines[0])))
        else:
            self.notify("No engine to show", severity="warning")


def _sync_panels(box: Widget, kind: type, want: list[Any], make: Any) -> None:
    """Mount a panel for each wanted key and remove the rest.

    Panels carry no DOM id: a removal completes only after this tick, so an id
    derived from a count or even from the key could be taken again by a panel
    mounted before the old one is gone (DuplicateIds when a scenario comes back).
    Panels already on their way out do not count as present.
    """
    have = {p.key: p for p in box.children if isinstance(p, kind) and not p.leaving}
    for key, panel in have.items():
        if key not in want:
            panel.leaving = True
            panel.remove()
    new = [make(k) for k in want if k not in have]
    if new:
        box.mount_all(new)


class DetailBody(Widget):
    DEFAULT_CSS = "DetailBody { height: auto; }"

    def __init__(self) -> None:
        super().__init__(id="detail")
        self.text = Text()

    def set_text(self, text: Text) -> None:
        if text == self.text:
            return  # the same detail again: nothing to repaint
        self.text = text
        self.refresh(layout=True)

    def render(self) -> Text:
        return self.text


class DetailScreen(DataScreen):
    BINDINGS = [Binding("escape,backspace", "app.pop_screen", "Back")]

    def compose(self) -> ComposeResult:
        yield StatusBar(id="status")
        with VerticalScroll(id="detail-scroll"):
            yield DetailBody()
        yield Footer()

    def update_view(self, view: View) -> None:
        self.query_one(StatusBar).update(self.status_text())
        body = self.query_one(DetailBody)
        width = max(40, (body.content_size.width or self.size.width - 4))
        body.set_text(self.draw(view, width))

    def draw(self, view: View, width: int) -> Text:  # pragma: no cover - overridden
        return Text()


DETAIL_LABEL_W = 11


def meter(text: Text, label: str, ratio: float | None, width: int, *args: Any, **kw: Any) -> None:
    _meter(text, label, ratio, width, *args, label_w=DETAIL_LABEL_W, **kw)


def scaled_meter(
    text: Text,
    label: str,
    now: float | None,
    series: list[float | None],
    top: float | None,
    width: int,
    **kw: Any,
) -> None:
    """A meter of a reading with no natural 0-1 scale, against `top` (a limit, or the
    series' own peak); no top, no bar."""

    def rel(v: float | None) -> float | None:
        return v / top if v is not None and top else None

    meter(text, label, rel(now), width, [rel(v) for v in series], **kw)


def _peak(values: list[float | None], *floor: float) -> float:
    return max([v for v in values if v is not None] + list(floor))


def process_table(text: Text, g: Mapping[str, Any], width: int) -> None:
    """The processes holding the GPU: the engine's first in bold, others plain, unseen dim."""
    procs = g.get("processes")
    if procs is None:
        return
    text.append("\nprocesses", style="bold")
    text.append(
        "  (read every few seconds; SM: share of the GPU's time with its kernels)\n", style="dim"
    )
    if not procs:
        text.append("  none\n", style="dim")
        return
    head = ("pid", "user", "memory", "SM", "owner", "container/pod", "command")
    widths = (8, 10, 9, 5, 11, 22)
    rows = sorted(process_rows(g), key=lambda r: r[4] != "engine")
    for i, row in enumerate((head, *rows)):
        cells = [
            f"{c[:w]:<{w}}" if j not in (2, 3) else f"{c:>{w}}"
            for j, (c, w) in enumerate(zip(row, widths))
        ]
        line = "  " + " ".join(cells) + " " + row[6]
        style = "bold" if i == 0 or row[4] == "engine" else "dim" if row[4] == "not visible" else ""
        text.append(line[: max(20, width - 2)] + "\n", style=style)


def gpu_energy_words(g: Mapping[str, Any], window_s: float | None) -> str:
    """ "4.1 kJ over 10.0 s (412 W), from the energy counter; 1.23 MJ on the counter", power
    times the window where the GPU has no counter, or a dash and why."""
    j, how = g.get("energy_joules"), "the energy counter"
    if g.get("energy_source") == "power":
        how = "its power readings (no energy counter)"
    if j is None and g.get("power_watts") is not None and window_s:
        j, how = g["power_watts"] * window_s, "its mean power x the window (no energy counter)"
    if j is None:
        why = "NVML gives none for a MIG instance" if g.get("mig_parent") is not None else ""
        return "- (no energy or power reading" + (f": {why})" if why else ")")
    watts = f" ({j / window_s:.0f} W)" if window_s else ""
    out = f"{fmt.si(j, 'J')} over {fmt.num(window_s, '.1f')} s{watts}, from {how}"
    total = g.get("energy_joules_total")
    return out + (f"; {fmt.si(total, 'J')} on the counter" if total is not None else "")


def engine_energy_words(e: Mapping[str, Any], box: Mapping[str, Any] | None) -> str:
    """ "0.055 J/token · 5.3 J/request · 18.2 tokens/J · 412 W · $0.34/M tokens" or a dash."""
    jt = e.get("energy_per_token_joules")
    if jt is None:
        missing = ", ".join((box or {}).get("missing") or ())
        return "-" + (f" (no energy reading for {missing})" if missing else "")
    parts = [
        f"{fmt.num(jt, '.3g')} J/token",
        f"{fmt.num(e.get('energy_per_request_joules'), '.3g')} J/request",
        f"{fmt.num(e.get('tokens_per_joule'), '.3g')} tokens/J",
    ]
    if box and box.get("power_watts") is not None:
        parts.append(f"GPUs {box['power_watts']:.0f} W")
    cost = e.get("cost_per_million_tokens")
    if cost is not None:
        parts.append(f"${cost:.3g} per M tokens")
    return " · ".join(parts)


def _row(text: Text, label: str, value: str) -> None:
    text.append(f"{label:<25} ", style="bold")
    text.append(value + "\n")


def verdict_words(text: Text, v: Mapping[str, Any]) -> None:
    """A verdict in full: headline, summary, every piece of evidence, the fix."""
    text.append(f"\n{fmt.cause_headline(v['cause'])}", style="bold")
    text.append(f" (confidence {fmt.pct(v.get('confidence'), 0).strip()})\n")
    text.append(f"{v.get('summary', '')}\n")
    for e in v.get("evidence", ()):
        if "profile" not in e:  # the profile has its own table on the engine screen
            text.append(f"  - {fmt.evidence_words(e)}\n")
    text.append("fix: ", style="bold")
    text.append(f"{v.get('fix', '')}\n")
    if v.get("next"):
        text.append("next: ", style="bold")
        text.append(f"{v['next']}\n")


class GpuDetailScreen(DetailScreen):
    def __init__(self, index: int) -> None:
        super().__init__(name=f"gpu-{index}")
        self.index = index

    def draw(self, view: View, width: int) -> Text:
        text = Text()
        g = view.gpu(self.index)
        text.append(f"GPU {self.index}", style="bold reverse")
        if g is None:
            text.append("  not in the latest reading\n")
            return text
        text.append(f"  {g.get('name')} · {g.get('source')} · {g.get('uuid')}\n\n")

        def s(index: int, key: str) -> list[float | None]:
            return view.columns(view.gpu_series(index, key))

        util, sm = g.get("util"), g.get("sm_active")
        meter(text, "duty", util, width, s(self.index, "util"))
        meter(text, "SM act", sm, width, s(self.index, "sm_active"))
        if util is not None and sm is not None:
            verdict = (
                next(
                    (
                        v
                        for v in view.report.get("verdicts", ())
                        if v.get("scope") == f"gpu:{self.index}"
                    ),
                    None,
                )
                if view.report
                else None
            )
            text.append(
                f"{'':<{DETAIL_LABEL_W}}duty - SM active: {100 * (util - sm):.0f} points"
                f" ({gap_words(util, sm, verdict)})\n",
                style="dim",
            )
        for label, key in (
            ("occup", "sm_occupancy"),
            ("tensor", "tensor_active"),
            ("DRAM", "dram_active"),
            ("fp16", "fp16_active"),
            ("fp32", "fp32_active"),
            ("mem duty", "mem_util"),
        ):
            meter(text, label, g.get(key), width, s(self.index, key))
        power, clk = g.get("power_watts"), g.get("sm_clock_hz")
        for label, key, top, value in (
            ("power", "power_watts", "power_limit_watts", f"{fmt.num(power, '.0f')} W"),
            ("clock", "sm_clock_hz", "sm_clock_max_hz", f"{fmt.num(clk and clk / 1e6, '.0f')} MHz"),
        ):
            scaled_meter(
                text, label, g.get(key), s(self.index, key), g.get(top), width, value=value
            )
        text.append("\n")
        text.append(gpu_facts(g) + "\n")
        _row(
            text,
            "PCIe tx / rx",
            f"{fmt.si(g.get('pcie_tx_bytes_per_s'), 'B/s')} / {fmt.si(g.get('pcie_rx_bytes_per_s'), 'B/s')}",
        )
        _row(
            text,
            "NVLink tx / rx",
            f"{fmt.si(g.get('nvlink_tx_bytes_per_s'), 'B/s')} / {fmt.si(g.get('nvlink_rx_bytes_per_s'), 'B/s')}",
        )
        _row(
            text, "throttle reasons", ", ".join(g.get("throttle_reasons") or ()) or "none reported"
        )
        _row(text, "energy", gpu_energy_words(g, (view.report or {}).get("window_s")))
        if g.get("mig_parent") is not None:
            _row(text, "MIG instance of GPU", str(g["mig_parent"]))
        for k, v in (g.get("labels") or {}).items():
            _row(text, k, str(v))
        process_table(text, g, width)
        verdicts = [
            v
            for v in (view.report or {}).get("verdicts", ())
            if v.get("scope") == f"gpu:{self.index}"
        ]
        for v in verdicts:
            verdict_words(text, v)
        return text


# vLLM's cache_config_info keys that bear on capacity; the ~30 others (mamba_*, hashing, ...)
# are shown only on request.
CACHE_KEYS = frozenset(
    {
        "block_size",
        "num_gpu_blocks",
        "num_cpu_blocks",
        "gpu_memory_utilization",
        "cache_dtype",
        "enable_prefix_caching",
        "kv_cache_size_tokens",
        "kv_cache_max_concurrency",
        "kv_cache_memory_bytes",
        "sliding_window",
    }
)


class EngineDetailScreen(DetailScreen):
    BINDINGS = [
        *DetailScreen.BINDINGS,
        Binding("c", "toggle_config", "All cache config"),
        Binding("p", "app.profile", "Profile"),
    ]

    def __init__(self, key: str) -> None:
        super().__init__(name="engine")
        self.key = key
        self.all_config = False

    def action_toggle_config(self) -> None:
        self.all_config = not self.all_config
        self.redraw()

    def draw(self, view: View, width: int) -> Text:
        text = Text()
        e = view.engine(self.key)
        text.append("Engine", style="bold reverse")
        if e is None:
            text.append("  not in the latest reading\n")
            return text
        text.append(f"  {e.get('model_name')} · engine {e.get('engine')} · {e.get('url')}\n\n")
        view_s = view.engine_series

        def s(key: str, name: str) -> list[float | None]:
            return view.columns(view_s(key, name))

        a = e.get("analysis") or {}
        cap = a.get("seq_cap")
        # Counts and rates have no natural scale: each bar is against its own peak so far
        # (running against the sequence cap where it is known); the sparklines hold means of
        # whole columns, so the reading now counts too.
        run, wait = s(self.key, "running"), s(self.key, "waiting")
        gen, ttft = s(self.key, "generation_tokens_per_s"), s(self.key, "ttft_p95_s")
        r_now, w_now = e.get("running"), e.get("waiting")
        g_now, t_now = e.get("generation_tokens_per_s"), e.get("ttft_p95_s")
        scaled_meter(
            text,
            "running",
            r_now,
            run,
            _peak(run, cap or 0, r_now or 0, 1.0),
            width,
            value=fmt.num(r_now, ".1f"),
            style="cyan",
        )
        scaled_meter(
            text,
            "waiting",
            w_now,
            wait,
            _peak(wait, w_now or 0, 1.0),
            width,
            value=fmt.num(w_now, ".1f"),
            style="magenta",
        )
        meter(text, "KV", e.get("kv_cache_usage"), width, s(self.key, "kv_cache_usage"))
        scaled_meter(
            text,
            "gen tok/s",
            g_now,
            gen,
            _peak(gen, g_now or 0, 1.0),
            width,
            value=fmt.si(g_now),
            style="green",
        )
        scaled_meter(
            text,
            "TTFT p95",
            t_now,
            ttft,
            _peak(ttft, t_now or 0, 1e-3),
            width,
            value=fmt.seconds(t_now),
            style="yellow",
        )
        text.append("\n")
        _row(
            text,
            "running (mean/max)",
            f"{fmt.num(e.get('running'), '.1f')} / {fmt.num(e.get('running_max'), '.0f')}",
        )
        _row(
            text,
            "waiting (mean/max)",
            f"{fmt.num(e.get('waiting'), '.1f')} / {fmt.num(e.get('waiting_max'), '.0f')}",
        )
        _row(
            text,
            "waiting by reason",
            f"capacity {fmt.num(e.get('waiting_capacity'), '.1f')} · deferred {fmt.num(e.get('waiting_deferred'), '.1f')}",
        )
        _row(
            text,
            "KV cache (mean/max)",
            f"{fmt.pct(e.get('kv_cache_usage'), 0)} / {fmt.pct(e.get('kv_cache_usage_max'), 0)}",
        )
        _row(text, "preemptions", f"{fmt.num(e.get('preemptions_per_s'), '.3g')}/s")
        _row(
            text,
            "requests",
            f"{fmt.num(e.get('requests_per_s'), '.3g')}/s · rejected {fmt.num(e.get('admission_rejections_per_s'), '.3g')}/s",
        )
        _row(
            text,
            "tokens",
            f"gen {fmt.si(e.get('generation_tokens_per_s'))}/s · prompt {fmt.si(e.get('prompt_tokens_per_s'))}/s · {fmt.num(e.get('iteration_tokens_mean'), '.4g')} per step",
        )
        _row(
            text,
            "TTFT p50 / p95",
            f"{fmt.seconds(e.get('ttft_p50_s'))} / {fmt.seconds(e.get('ttft_p95_s'))}",
        )
        _row(
            text,
            "ITL p50 / p95",
            f"{fmt.seconds(e.get('itl_p50_s'))} / {fmt.seconds(e.get('itl_p95_s'))}",
        )
        _row(
            text,
            "e2e mean / p50 / p95",
            f"{fmt.seconds(e.get('e2e_mean_s'))} / {fmt.seconds(e.get('e2e_p50_s'))} / {fmt.seconds(e.get('e2e_p95_s'))}",
        )
        _row(
            text,
            "queue / prefill / decode",
            f"{fmt.seconds(e.get('queue_mean_s'))} / {fmt.seconds(e.get('prefill_mean_s'))} / {fmt.seconds(e.get('decode_mean_s'))} (means)",
        )
        _row(text, "energy", engine_energy_words(e, (view.report or {}).get("energy")))
        cc = e.get("cache_config") or {}
        if cc:
            # The few keys that bear on capacity; the rest (mamba_*, ...) behind `c`.
            shown = cc if self.all_config else {k: v for k, v in cc.items() if k in CACHE_KEYS}
            hidden = len(cc) - len(shown)
            _row(
                text,
                "cache config",
                ", ".join(f"{k}={v}" for k, v in sorted(shown.items()))
                + (f" (+{hidden} more: c shows them)" if hidden else ""),
            )
        text.append("\n")
        widens = bool((view.report or {}).get("window_widens_to_s"))
        text.append_text(littles_lines(e, width, widens))
        for w in (e.get("whatif") or [])[:2]:
            text.append("what-if  ", style="bold")
            text.append(fmt.clip(whatif_text(w), width - 9) + "\n")
        prof = e.get("cpu_profile")
        if prof:
            text.append("\n")
            for line in profile_lines(prof):
                text.append(fmt.clip(line, width) + "\n")
        else:
            text.append(
                "\ncpu profile: none taken (p profiles the engine's hot thread)\n", style="dim"
            )
        scope_prefix = f"engine:{e.get('model_name')}/{e.get('engine')}@"
        for v in (view.report or {}).get("verdicts", ()):
            if str(v.get("scope", "")).startswith(scope_prefix):
                verdict_words(text, v)
        return text


class SweepScreen(DetailScreen):
    """Steps so far, throughput and latency against load, and the saturation point once found."""

    def draw(self, view: View, width: int) -> Text:
        return draw_sweep(self.app.sweep_state, width)  # type: ignore[attr-defined]


def draw_sweep(state: SweepState | None, width: int) -> Text:
    text = Text()
    text.append("Sweep", style="bold reverse")
    if state is None:
        text.append(
            "  none followed: run `headroom sweep ... --out DIR` and start watch with --sweep DIR"
            " (in the demo, W starts one)\n"
        )
        return text
    text.append(f"  {state.path}")
    if state.stopped:
        text.append(f" · {state.stopped}")
    text.append("\n")
    before = state.before or {}
    if before.get("saturated"):
        # First, before any figure: every step below queues behind this traffic.
        for line in textwrap.wrap(f"warning: {before.get('summary')}", max(20, width)):
            text.append(line + "\n", style="bold")
    elif before.get("summary"):
        # Other traffic that leaves room: R and Q below count it too.
        for line in textwrap.wrap(f"note: {before.get('summary')}", max(20, width)):
            text.append(line + "\n", style="dim")
    if state.error and not state.steps:
        text.append(f"{state.error}\n", style="dim")
        return text
    sat: Mapping[str, Any] | None = state.saturation
    mark = None
    wrap = max(20, width)
    if sat and sat.get("reached"):
        mark = sat.get("concurrency") if sat.get("concurrency") is not None else sat.get("rate")
        line = (
            f"saturation: at {fmt.num(mark, 'g')} ({fmt.si(sat.get('output_tokens_per_s'))} tok/s, "
            f"{fmt.num(sat.get('requests_per_s'), '.3g')} req/s), cause {sat.get('cause') or '-'}"
            f" · {sat.get('reason', '')}"
            if mark is not None or not before.get("saturated")
            # No load of the sweep's: the box was saturated before it.
            else f"saturation: before the sweep, cause {sat.get('cause') or '-'} · "
            f"{sat.get('reason', '')}"
        )
        for part in textwrap.wrap(line, wrap, subsequent_indent="  "):
            text.append(part + "\n")
    elif sat:
        # The reason says "not reached: ..." or "not measured: ..." itself.
        reason = str(sat.get("reason") or "")
        head = "saturation: " if reason.startswith("not ") else "saturation: not reached · "
        for part in textwrap.wrap(head + reason, wrap, subsequent_indent="  "):
            text.append(part + "\n", style="bold")
    else:
        text.append("saturation: not found yet\n", style="dim")
    text.append("\n")
    hdr = f"{'step':>4} {'load':>7} {'req/s':>8} {'tok/s':>8} {'TTFT p95':>9} {'e2e p50':>9} {'R':>6} {'Q':>6}  verdict"
    text.append(hdr + "\n", style="bold")
    for s in state.steps:
        # None finished in the hold (streams longer than it): a dash, not a rate of zero.
        done = s.get("requests_completed")
        rps = "-" if done == 0 else fmt.num(s.get("requests_per_s"), ".3g")
        row = (
            f"{s.get('index', 0):>4} {fmt.num(load_of(s), 'g'):>7} {rps:>8} "
            f"{fmt.si(s.get('output_tokens_per_s')):>8} {fmt.seconds(s.get('ttft_p95_s')):>9} "
            f"{fmt.seconds(s.get('e2e_p50_s')):>9} {fmt.num(s.get('running_mean'), '.1f'):>6} "
            f"{fmt.num(s.get('waiting_mean'), '.1f'):>6}  {s.get('verdict') or '-'}"
        )
        if s.get("valid", True):
            text.append(fmt.clip(row, width) + "\n")
            continue
        # Why, whole, under the row: clipped at the row's end it lost its point (and at 80
        # columns the word INVALID itself).
        text.append(fmt.clip(row, width) + "\n")
        why = f"INVALID: {s.get('invalid_reason') or 'no reason given'}"
        for part in textwrap.wrap(why, max(20, width - 6)):
            text.append(" " * 6 + part + "\n", style="dim")
    chart_w = max(10, width - 12)
    if state.steps:
        text.append("\nthroughput (output tok/s) vs load\n", style="bold")
        for line in chart(state.steps, "output_tokens_per_s", chart_w, 6, mark):
            text.append(line + "\n")
        text.append("\nlatency (e2e p50, s) vs load\n", style="bold")
        for line in chart(state.steps, "e2e_p50_s", chart_w, 6, mark):
            text.append(line + "\n")
    return text


HELP = [
    ("q", "quit"),
    ("p / space", "pause or resume the display (a replay stops advancing)"),
    ("p on an engine", "profile its hot thread's Python stacks (py-spy, non-blocking)"),
    ("tab / shift+tab", "move between panels"),
    ("enter", "detail of the focused panel (the engine's when none is)"),
    ("g / e", "detail of the first GPU / engine"),
    ("escape", "back to the main screen"),
    ("+ / -", "faster / slower: the sampling interval, or a replay's speed"),
    ("r", "start or stop recording to JSONL (replay: headroom watch --replay FILE)"),
    ("w", "sweep view (steps, throughput and latency vs load, saturation)"),
    ("W", "demo: start or stop a sweep against the simulator"),
    ("s / 1-9, 0", "demo: next scenario / pick one (listed below)"),
    ("?", "this help"),
]


def scenario_keys(names: Sequence[str]) -> list[tuple[str, str]]:
    """The digit that picks each demo scenario: 1-9, then 0 for the tenth."""
    return [(str((i + 1) % 10), name) for i, name in enumerate(names[:10])]


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,question_mark,q", "dismiss", "Close")]

    def __init__(self) -> None:
        super().__init__()
        tighten(self)

    def compose(self) -> ComposeResult:
        text = Text()
        text.append("headroom keys\n\n", style="bold")
        for key, what in HELP:
            text.append(f"{key:<17}", style="bold")
            text.append(what + "\n")
        ctl = getattr(self.app, "scenarios", None)
        if ctl is not None:
            text.append("\nscenarios\n", style="bold")
            for key, name in scenario_keys(list(ctl.names)):
                mark = " (now)" if name == ctl.current else ""
                text.append(f"  {key}  ", style="bold")
                text.append(f"{name}{mark}\n")
        text.append(
            "\nThe diagnosis names one cause with its evidence and the first fix to try.\n"
            "duty = NVML utilization (any kernel running); SM act = share of SMs busy:\n"
            "a large gap means kernels that fill few SMs (launch-bound when kernels\n"
            "leave gaps between them).\n"
            "A dash is a figure the source does not provide, never a zero.\n"
        )
        text.append("\nescape or ? closes this help (arrows scroll it)", style="dim")
        # Scrolls inside the screen: at 80x24 the keys and scenarios are taller than it.
        with VerticalScroll(id="help-box"):
            yield Static(text, id="help")

    def action_dismiss(self) -> None:  # type: ignore[override]
        self.dismiss(None)


__all__ = [
    "DataScreen",
    "EngineDetailScreen",
    "GpuDetailScreen",
    "HelpScreen",
    "MainScreen",
    "Panel",
    "SweepScreen",
]
