"""The panels of the main screen. Each draws one part of the latest View as text.

Panels hold no data of their own beyond the View the app hands them; they
never read a source. Text carries the meaning (labels, percentages, words),
colour only underlines it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.cells import cell_len
from rich.text import Text
from textual.geometry import Region, Size
from textual.strip import Strip
from textual.visual import visualize
from textual.widget import Widget

from monitor.text.capacity import NONE_FINISHED, capacity_words, headroom_words
from monitor.tui import fmt
from monitor.tui.view import ENGINE_SOURCES, GPU_SOURCES, HOST_SOURCES, View
from monitor.watch.report import engine_title, missing_notes

Report = Mapping[str, Any]

LABEL_W = 8
# Draws (seconds, at the default interval) a panel keeps its height after its text got
# shorter, before it shrinks.
SHRINK_AFTER = 30
# A duty cycle this far above SM active means kernels run but each uses little of the GPU.
GAP_NOTICE = 0.25


def level_style(ratio: float | None) -> str:
    if ratio is None:
        return "dim"
    if ratio >= 0.8:
        return "green"
    if ratio >= 0.4:
        return "yellow"
    return "red"


def spark_width(width: int) -> int:
    """Cells of a meter's sparkline at the end of a line ``width`` wide (0: no room)."""
    return 0 if width < 56 else min(30, max(8, width // 4))


def meter(
    text: Text,
    label: str,
    ratio: float | None,
    width: int,
    history: Sequence[float | None] = (),
    value: str | None = None,
    style: str | None = None,
    spark_top: float | None = 1.0,
    label_w: int = LABEL_W,
) -> None:
    """One labelled bar: ``label  █████····  42%  ▁▂▃▅`` (the sparkline only when there is room)."""
    spark_w = spark_width(width)
    val = value if value is not None else fmt.pct(ratio)
    val_w = max(5, len(val) + 1)
    bar_w = max(4, width - label_w - val_w - (spark_w + 1 if spark_w else 0))
    text.append(f"{label:<{label_w}}", style="bold")
    # The filled part as reversed spaces, not full blocks: the same look (reverse needs no
    # colour, so NO_COLOR keeps it) at one byte a cell instead of three, and a bar is
    # rewritten whenever its value moves.
    drawn, st = fmt.bar(ratio, bar_w), style or level_style(ratio)
    full = len(drawn) - len(drawn.lstrip("█"))
    if full:
        text.append(" " * full, style=f"{st} reverse")
    text.append(drawn[full:], style=st)
    text.append(val.rjust(val_w))
    if spark_w:
        text.append(" ")
        text.append(fmt.sparkline(history, spark_w, spark_top), style="cyan")
    text.append("\n")


class _QuietTitle:
    """A border title that repaints only when it changes: Textual's repaints the whole
    widget on every assignment, and panels set theirs each time they draw."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.key = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.key = f"_shown_{name}"

    def __get__(self, obj: Any, objtype: type | None = None) -> Any:
        return self.inner if obj is None else self.inner.__get__(obj, objtype)

    def __set__(self, obj: Any, title: Any) -> None:
        if self.key in obj.__dict__ and obj.__dict__[self.key] == title:
            return
        obj.__dict__[self.key] = title
        self.inner.__set__(obj, title)


class Panel(Widget, can_focus=True):
    """A bordered, focusable block of text that redraws from the app's View."""

    border_title = _QuietTitle(Widget.__dict__["border_title"])
    border_subtitle = _QuietTitle(Widget.__dict__["border_subtitle"])

    DEFAULT_CSS = """
    Panel { height: auto; }
    """
    # A panel whose title never changes names it here; the others set theirs as they draw.
    TITLE: str | None = None

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.view = View()
        self.leaving = False  # removal asked for, not yet done
        # (width, text, its lines) as last drawn: a view that draws the same text repaints
        # nothing, and one of the same height repaints only the lines that changed (people
        # leave this open over SSH: a whole-screen repaint each second is ~15 KB/s).
        self._drawn: tuple[int, Text, list[Text]] | None = None
        self._short = 0  # draws in a row that were shorter than the panel
        self.steady = fmt.Steady()
        # Each text line's strips as last rendered, and the style and width they were
        # rendered at: see render_line.
        self._strips: list[tuple[Text, list[Strip]]] = []
        self._strips_key: tuple[int, Any] | None = None
        self._screen_strips: list[Strip] | None = None
        self._split: list[Text] = []  # the drawn text's own lines (before any wrapping)

    def on_mount(self) -> None:
        if self.TITLE is not None:
            self.border_title = self.TITLE

    def update_view(self, view: View) -> None:
        self.view = view
        width = self.width
        text = self.draw(width)
        text.rstrip()
        drawn = self._drawn
        if drawn is not None and drawn[0] == width and not self._short and drawn[1] == text:
            return  # the same text as shown (most draws of most panels): nothing to do
        console = self.app.console
        split = text_lines(text)
        lines = screen_lines(text, width, console, split)
        if drawn is not None and drawn[0] == width and len(lines) < len(drawn[2]):
            # Shorter: keep the height a while (blank lines at the bottom). A height change
            # lays out and repaints the screen below the panel, and a line that wraps or
            # not by a digit (a verdict's evidence) would do it every few seconds.
            self._short += 1
            if self._short < SHRINK_AFTER:
                text.append("\n" * (len(drawn[2]) - len(lines)))
                split = text_lines(text)
                lines = screen_lines(text, width, console, split)
        else:
            self._short = 0
        if drawn is not None and drawn[0] == width and drawn[1] == text:
            return
        self._drawn = (width, text, lines)
        self._split = split
        self._screen_strips = None
        if drawn is None or drawn[0] != width or len(drawn[2]) != len(lines):
            self.refresh(layout=True)
            return
        regions = [
            Region(x0, y, x1 - x0, 1)
            for y, (old, new) in enumerate(zip(drawn[2], lines))
            if old != new
            for x0, x1 in changed_runs(old, new, width)
        ]
        if regions:
            self.refresh(*regions)

    def render_line(self, y: int) -> Strip:
        # Textual renders a widget's whole text to strips whenever any of its lines is
        # dirty: a figure that moved re-rendered every line of its panel (the largest part
        # of a frame's CPU). Each text line is rendered alone here and its strips kept
        # while it stays the same; Textual wraps a text line by line, so the strips are
        # the ones it would make of the whole.
        drawn = self._drawn
        width = self.size.width
        if (
            drawn is None
            or drawn[0] != width
            or self.text_selection is not None
            or self.styles.content_align != ("left", "top")
        ):
            return super().render_line(y)
        strips = self._screen_strips
        if strips is None:
            strips = self._screen_strips = self._render_strips(width)
        self._dirty_regions.clear()  # what Textual's own render_line would do
        if y < len(strips):
            return strips[y]
        return Strip.blank(width, self.visual_style.rich_style)

    def _render_strips(self, width: int) -> list[Strip]:
        style = self.visual_style
        if self._strips_key != (width, style):
            self._strips_key, self._strips = (width, style), []
        old = self._strips
        new: list[tuple[Text, list[Strip]]] = []
        out: list[Strip] = []
        for y, line in enumerate(self._split):
            if y < len(old) and old[y][0] == line:
                strips = old[y][1]
            else:
                strips = self._line_strips(line, y, width, style)
            new.append((line, strips))
            out += strips
        self._strips = new
        return out[: self.size.height]

    def _line_strips(self, line: Text, y: int, width: int, style: Any) -> list[Strip]:
        """Text line ``y`` as Textual renders it within the whole text (Content's
        render_strips for one line, with the line's place in the text: mouse offsets)."""
        content = visualize(self, line)
        rule = self.styles.get_rule
        lines = content._wrap_and_format(  # type: ignore[attr-defined]
            width,
            align=rule("text_align", "left"),
            overflow=rule("text_overflow", "fold"),
            no_wrap=rule("text_wrap", "wrap") == "nowrap",
            line_pad=rule("line_pad", 0),
            tab_size=8,
            get_style=self._get_style,
        )
        for formatted in lines:
            formatted.y = y
        # No link styling: a rich Text's lines carry no @click actions for it to find.
        return [Strip(*formatted.to_strip(style)) for formatted in lines]

    def hold(self, key: str, ratio: float | None) -> float | None:
        """A ratio as shown: the percentage last shown while the reading stays within a
        point of it (a bar and its figure move together, when a user would see a change)."""
        return self.steady(key, ratio, 0.01, 2)

    @property
    def width(self) -> int:
        return max(20, self.content_size.width or 76)

    def render(self) -> Text:
        width = self.width
        if self._drawn is not None and self._drawn[0] == width:
            return self._drawn[1]
        text = self.draw(width)
        text.rstrip()
        return text

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        drawn = self._drawn
        if drawn is not None and drawn[0] == max(20, width):
            return len(drawn[2])  # as drawn, kept height included
        # Measure at the width we will be given, so bars sized to it do not wrap.
        text = self.draw(max(20, width))
        text.rstrip()
        return len(screen_lines(text, max(1, width), self.app.console))

    def draw(self, width: int) -> Text:  # pragma: no cover - every panel overrides it
        return Text()


def text_lines(text: Text) -> list[Text]:
    """A text's own lines (a line that will wrap is one of them)."""
    return list(text.split("\n", allow_blank=True))


def screen_lines(
    text: Text, width: int, console: Any, lines: list[Text] | None = None
) -> list[Text]:
    """The lines a text takes on screen at ``width``: its own lines (``lines`` when given)
    where they fit (most do: panels clip what could overflow), which is several times
    cheaper than wrapping."""
    lines = text_lines(text) if lines is None else lines
    if all(cell_len(line.plain) <= width for line in lines):
        return lines
    return list(text.wrap(console, max(1, width)))


# Unchanged cells between two changed runs of a line that are written anyway rather than
# starting a new run: a run costs a cursor move and its colours (~30 bytes), a cell ~1-3.
RUN_GAP = 12


def changed_runs(old: Text, new: Text, width: int) -> list[tuple[int, int]]:
    """The runs of columns [x0, x1) of a line that differ in character or style between
    two draws, those closer than ``RUN_GAP`` cells joined (the screen writes these alone:
    a bar's end and its figure, not the line up to them)."""
    a, b = old.plain, new.plain
    if cell_len(a) != len(a) or cell_len(b) != len(b):
        return [(0, width)]  # wide characters: cells are not characters, repaint it all
    n = min(width, max(len(a), len(b)))
    # Past its text a line is "\0" here: no character of a panel's, so it differs from
    # any (padding shows whatever it shows) and not from another line's end.
    pa, pb = a[:n].ljust(n, "\0"), b[:n].ljust(n, "\0")
    if old.spans == new.spans and old.style == new.style:
        diff = [i for i, (x, y) in enumerate(zip(pa, pb)) if x != y]
    else:
        sa, sb = _cell_styles(old, n), _cell_styles(new, n)
        diff = [i for i, (x, y, p, q) in enumerate(zip(pa, pb, sa, sb)) if x != y or p != q]
    runs: list[tuple[int, int]] = []
    for i in diff:
        if runs and i - runs[-1][1] < RUN_GAP:
            runs[-1] = (runs[-1][0], i + 1)
        else:
            runs.append((i, i + 1))
    return runs


def _cell_styles(line: Text, n: int) -> list[Any]:
    """Each of ``n`` cells' styles, as the spans over it in order (past the text: None)."""
    styles: list[Any] = [(line.style,)] * len(line.plain) + [None] * (n - len(line.plain))
    for span in line.spans:
        end = min(span.end, len(line.plain))
        styles[span.start : end] = [(*st, span.style) for st in styles[span.start : end]]
    return styles


def source_errors(text: Text, errors: Sequence[Report]) -> None:
    for err in errors:
        text.append("! ", style="bold red")
        text.append(f"{err.get('source')} {fmt.short_url(str(err.get('target', '')))}: ")
        text.append(f"{err.get('message')}\n", style="red")


class DiagnosisPanel(Panel):
    """The verdicts in words: cause, confidence, since when, evidence and the first fix."""

    TITLE = "Diagnosis"

    def draw(self, width: int) -> Text:
        text = Text()
        rep = self.view.report
        if rep is None:
            text.append("Waiting for the first reading...", style="dim")
            if self.view.feed_error:
                text.append("\n")
                source_errors(text, [{"source": "feed", "message": self.view.feed_error}])
            return text
        # The diagnosis already orders verdicts (stable causes first): keep its order.
        verdicts = list(rep.get("verdicts", ()))
        if not verdicts:
            text.append("No verdict yet: ", style="bold")
            text.append(f"collecting data ({rep.get('samples', 0)} samples so far).")
            return text
        # Each held whole while its figures jitter by less than they are read to (a window's
        # mean moving across a rounding edge repainted the summary and evidence every tick).
        verdicts = [self.steady.verdict(f"{v.get('cause')}@{v.get('scope')}", v) for v in verdicts]
        top = verdicts[0]
        now = rep.get("time")
        since = top.get("since")
        # Since a clock time, with whole minutes once there are any: a count of seconds
        # would repaint this line every tick.
        lasted = None
        if isinstance(now, float | int) and since:
            lasted = f"since {fmt.clock(since)}"
            if now - since >= 60:
                lasted += f" ({fmt.duration(60 * ((now - since) // 60))})"
        conf = top.get("confidence") or 0.0
        text.append(f"{fmt.cause_label(top['cause']).upper()}", style="bold reverse")
        text.append(f"  {fmt.scope_words(top['scope'])} · confidence {fmt.pct(conf, 0)}")
        if lasted:
            text.append(f" · {lasted}")
        text.append("\n")
        text.append(fmt.cause_headline(top["cause"]) + "\n", style="bold")
        if top.get("summary"):
            text.append(fmt.summary_after_headline(top["cause"], top["summary"]) + "\n")
        # The numbers held against a threshold decided it; the rest is context (detail screens).
        deciding = [e for e in top.get("evidence", ()) if e.get("op")] or list(
            top.get("evidence", ())
        )
        ev = [fmt.evidence_words(e) for e in deciding[:4]]
        if ev:
            text.append("evidence: ", style="bold")
            text.append(" · ".join(ev) + "\n")
        if top.get("fix"):
            text.append("fix: ", style="bold green")
            text.append(f"{top['fix']}\n")
        if top.get("next"):
            # The command that shows which code or kernels, on one line here (the detail
            # screens give it whole).
            text.append("next: ", style="bold")
            text.append(fmt.clip(top["next"], width - 6) + "\n")
        if top.get("missing"):
            text.append(f"(less sure: no {', '.join(top['missing'])})\n", style="dim")
        for v in verdicts[1:]:
            # One line each: the lead verdict keeps the room; the detail screens say the rest.
            line = (
                f"{fmt.cause_label(v['cause'])} on {fmt.scope_words(v['scope'])} "
                f"({fmt.pct(v.get('confidence'), 0).strip()})"
            )
            if v.get("summary"):
                line += f": {fmt.summary_after_headline(v['cause'], v['summary'])}"
            text.append("also: ", style="bold")
            text.append(fmt.clip(line, width - 6) + "\n")
        return text


def no_reading() -> Text:
    """What a GPU or engine panel shows on a tick that has no reading of it."""
    text = Text()
    text.append("no reading on this tick", style="dim")
    return text


class GpuPanel(Panel):
    """One GPU: duty cycle right above SM active, so the gap between them shows at a glance."""

    def __init__(self, index: int) -> None:
        super().__init__(classes="gpu")
        self.index = index
        self.key = index

    def draw(self, width: int) -> Text:
        g = self.view.gpu(self.index)
        if g is None:
            return no_reading()
        self.border_title = f"GPU {g['index']} · {g.get('name', '')} · {g.get('source', '')}"
        text = Text()
        # Held as shown on the bars below: the gap in the border moves when they do (a new
        # border repaints the whole panel).
        util, sm = self.hold("util", g.get("util")), self.hold("sm_active", g.get("sm_active"))
        gap = util - sm if util is not None and sm is not None else None
        self.border_subtitle = (
            f"duty - SM active gap {100 * gap:.0f} pts"
            if gap is not None and gap >= GAP_NOTICE
            else ""
        )
        view = self.view
        for label, key, now in (
            ("duty", "util", util),
            ("SM act", "sm_active", sm),
            ("occup", "sm_occupancy", g.get("sm_occupancy")),
            ("tensor", "tensor_active", g.get("tensor_active")),
            ("DRAM", "dram_active", g.get("dram_active")),
        ):
            past = view.gpu_columns(self.index, key)
            meter(text, label, self.hold(key, now), width, past)
        steady = self.steady
        g = {
            **g,
            "power_watts": steady("power", g.get("power_watts"), 5.0),
            "sm_clock_hz": steady("clock", g.get("sm_clock_hz"), 30e6, -6),
        }
        text.append(gpu_facts(g) + "\n")
        return text


def gpu_facts(g: Report) -> str:
    power = f"power {fmt.num(g.get('power_watts'), '.0f')}"
    if g.get("power_limit_watts"):
        power += f"/{g['power_limit_watts']:.0f}"
    clock_v, clock_max = g.get("sm_clock_hz"), g.get("sm_clock_max_hz")
    clock = f"clock {fmt.num(clock_v and clock_v / 1e6, '.0f')}"
    if clock_max:
        clock += f"/{clock_max / 1e6:.0f}"
    mem = f"mem {fmt.gib(g.get('memory_used_bytes'))}/{fmt.gib(g.get('memory_total_bytes'))} GiB"
    parts = [power + " W", clock + " MHz", mem]
    if g.get("temperature_c") is not None:
        parts.append(f"{g['temperature_c']:.0f} C")
    tx, rx = g.get("nvlink_tx_bytes_per_s"), g.get("nvlink_rx_bytes_per_s")
    if tx or rx:
        # Only where links carry traffic: a lone GPU reads 0 and keeps its line short.
        parts.append(f"NVLink {fmt.si(tx, 'B/s')} tx/{fmt.si(rx, 'B/s')} rx")
    if g.get("throttle_reasons"):
        parts.append("throttle: " + ",".join(g["throttle_reasons"]))
    return " · ".join(parts)


class EnginePanel(Panel):
    """One engine: slots in use against the cap, the queue by reason, KV, throughput and latency."""

    def __init__(self, key: str) -> None:
        super().__init__(classes="engine")
        self.key = key

    def draw(self, width: int) -> Text:
        e = self.view.engine(self.key)
        if e is None:
            return no_reading()
        text = Text()
        e = self.steady.figures("engine", e)
        self.border_title = (
            f"{e.get('model_name') or '?'} · engine {e.get('engine') or '-'} · "
            f"{fmt.short_url(e.get('url', ''))} · {engine_title(e)}"
        )
        a = e.get("analysis") or {}
        view = self.view

        def s(key: str, name: str) -> list[float | None]:
            return view.engine_columns(key, name)

        running = e.get("running")
        cap = a.get("seq_cap")
        cap_ratio = running / cap if running is not None and cap else None
        cap_txt = f"{fmt.num(running, '.0f')}/{cap:.0f}" if cap else f"{fmt.num(running, '.1f')}"
        meter(
            text,
            "running",
            cap_ratio,
            width,
            s(self.key, "running"),
            value=cap_txt,
            style="cyan",
            spark_top=cap or None,
        )
        wait = e.get("waiting")
        meter(
            text,
            "waiting",
            None if wait is None else min(1.0, wait / max(1.0, cap or 64.0)),
            width,
            s(self.key, "waiting"),
            value=fmt.num(wait, ".0f"),
            style="magenta",
            spark_top=None,
        )
        kv = e.get("kv_cache_usage")
        kv = self.hold("kv", kv)
        meter(text, "KV", kv, width, s(self.key, "kv_cache_usage"), style=_kv_style(kv))
        # A dash is unknown, not 0: say why, so a missing gauge is not read as an idle one.
        for note in missing_notes(e):
            text.append(note + "\n", style="yellow")
        cap_note = "unknown (--max-num-seqs)" if not cap else f"{cap:.0f}" + _cap_how(a)
        text.append(
            f"seq cap {cap_note} · queue: capacity {fmt.num(e.get('waiting_capacity'), '.0f')}, "
            f"deferred {fmt.num(e.get('waiting_deferred'), '.0f')} · "
            f"preempt {fmt.num(e.get('preemptions_per_s'), '.2g')}/s\n"
        )
        text.append(
            f"tok/s gen {fmt.si(e.get('generation_tokens_per_s'))} prompt "
            f"{fmt.si(e.get('prompt_tokens_per_s'))} · req/s {fmt.num(e.get('requests_per_s'), '.3g')}"
        )
        if a.get("littles_unjudged") == "none-finished":
            text.append(f" ({NONE_FINISHED})", style="dim")
        text.append("\n")
        text.append(
            f"TTFT p50 {fmt.seconds(e.get('ttft_p50_s'))} p95 {fmt.seconds(e.get('ttft_p95_s'))}"
            f" · ITL p50 {fmt.seconds(e.get('itl_p50_s'))} p95 {fmt.seconds(e.get('itl_p95_s'))}\n"
        )
        parts = a.get("ttft_parts") or {}
        if parts.get("engine_ttft_s") is not None and parts.get("consistent"):
            text.append(
                f"TTFT mean {fmt.seconds(parts.get('engine_ttft_s'))} = queue "
                f"{fmt.seconds(parts.get('queue_s'))} + prefill {fmt.seconds(parts.get('prefill_s'))}"
                f" + other {fmt.seconds(parts.get('engine_other_s'))}\n"
            )
        text.append_text(
            headroom_line(a.get("headroom"), a.get("littles_unjudged") == "none-finished")
        )
        return text


def headroom_line(room: Report | None, none_finished: bool = False) -> Text:
    """How much more load fits and which limit comes first, in one line."""
    text = Text()
    text.append("headroom ", style="bold")
    if not room:
        text.append("- (no limit can be estimated from this window)\n", style="dim")
        return text
    words = headroom_words(room, none_finished)
    factor, rest = words.split(" ", 1)
    text.append(factor, style="bold green" if room["factor"] >= 1.5 else "bold")
    text.append(f" {rest}\n")
    return text


def _small_pct(v: float | None) -> str:
    """MFU is often well under 1%: keep two significant digits instead of rounding to 0%."""
    return "-" if v is None else f"{100 * v:.2g}%"


def _cap_how(a: Report) -> str:
    origin = a.get("seq_cap_origin")
    if origin == "remembered" and a.get("seq_cap_seen_at"):
        return f" inferred at {fmt.clock(a['seq_cap_seen_at'])}"
    if origin == "reported":
        return " reported"
    if origin == "given":
        return " given"
    return " inferred" if a.get("seq_cap_inferred") else ""


def _kv_style(kv: float | None) -> str:
    if kv is None:
        return "dim"
    return "red" if kv >= 0.9 else "yellow" if kv >= 0.7 else "green"


UNJUDGED = {
    "none-finished": f"{NONE_FINISHED}: widen --window",
    "few-completions": "too few finished to tell",
    "short-window": "requests outlast the window: widen --window",
    "inconclusive": "within what the window can measure",
}


def littles_lines(e: Report, width: int, self_widens: bool = False) -> Text:
    """Little's law, the rate that would fill the cap, busy fraction and the roofline, for one engine."""
    a = e.get("analysis") or {}
    text = Text()
    n, x, w = (
        a.get("littles_in_flight"),
        a.get("littles_throughput_rps"),
        a.get("littles_latency_s"),
    )
    text.append("Little   ", style="bold")
    text.append(
        f"in flight {fmt.num(n, '.3g')} vs {fmt.num(x, '.3g')} req/s x {fmt.seconds(w)}"
        f" = {fmt.num(x * w if x is not None and w is not None else None, '.3g')}"
    )
    ok = a.get("littles_ok")
    done = a.get("littles_completions")
    # How many finished in the window is how far the two sides can be trusted.
    n = f" ({done:.0f} finished)" if done is not None else ""
    if a.get("littles_unjudged") == "none-finished":
        n = ""  # the words say none did
    if ok is True:
        text.append(f"  agrees{n}", style="green")
    elif ok is False:
        text.append(f"  DISAGREE{n}: a queue outside the engine?", style="bold red")
    else:
        why = UNJUDGED.get(a.get("littles_unjudged") or "")
        if a.get("littles_unjudged") == "short-window" and self_widens:
            why = "requests outlast the window: widening it"
        elif a.get("littles_unjudged") == "none-finished" and self_widens:
            why = f"{NONE_FINISHED}: widening it"
        if why:
            text.append(f"  {why}{n}", style="dim")
    text.append("\n")
    text.append("capacity ", style="bold")
    text.append(capacity_words(a, _cap_how(a)) + "\n")
    text.append("GPU busy ", style="bold")
    text.append(
        f"{fmt.pct(a.get('busy_fraction'), 0)} of the time"
        f" · engine thread {fmt.pct(a.get('engine_thread_cpu_ratio'), 0)} of a core\n"
    )
    roof = a.get("roofline") or {}
    text.append("roofline ", style="bold")
    if roof and roof.get("arithmetic_intensity") is not None:
        ai, ridge = roof.get("arithmetic_intensity"), roof.get("ridge_intensity")
        line_w = max(10, min(30, width - 50))
        text.append("mem ")
        text.append(fmt.placement(ai, ridge, line_w), style="cyan")
        side = f": {roof['side']} side" if roof.get("side") else ""
        text.append(
            f" compute  {fmt.num(ai, '.3g')} FLOP/B vs ridge {fmt.num(ridge, '.3g')}{side}\n"
        )
        text.append(
            f"{'':9}{fmt.si(roof.get('achieved_flops_per_s'), 'FLOP/s')}"
            f" (MFU {_small_pct(roof.get('mfu'))}) · "
            f"{fmt.si(roof.get('achieved_bytes_per_s'), 'B/s')}"
            f" ({fmt.pct(roof.get('bandwidth_share'), 0).strip()} of peak bandwidth)"
        )
    else:
        text.append(
            "- (needs vLLM's estimated FLOP and byte counters and a known GPU)", style="dim"
        )
    text.append("\n")
    return text


class LittlePanel(Panel):
    TITLE = "Little's law · capacity · roofline"

    def draw(self, width: int) -> Text:
        text = Text()
        engines = self.view.engines()
        if not engines:
            text.append("no engine read", style="dim")
            return text
        total = (self.view.report or {}).get("engines_total")
        if total:
            total = self.steady.figures("total", total)
            # Data-parallel ranks or several servers: what they carry together.
            text.append(
                f"all {total['engines']} engines: running {fmt.num(total.get('running'), '.1f')}"
                f" · waiting {fmt.num(total.get('waiting'), '.1f')}"
                f" · gen {fmt.si(total.get('generation_tokens_per_s'))} tok/s"
                f" · {fmt.num(total.get('requests_per_s'), '.3g')} req/s\n",
                style="bold",
            )
        for e in engines:
            if len(engines) > 1:
                text.append(f"{e.get('model_name')}/{e.get('engine')}\n", style="underline")
            widens = bool((self.view.report or {}).get("window_widens_to_s"))
            e = self.steady.figures(fmt.engine_key(e), e)
            text.append_text(littles_lines(e, width, widens))
        return text


class HostPanel(Panel):
    TITLE = "Host"

    def draw(self, width: int) -> Text:
        text = Text()
        h = self.view.report.get("host") if self.view.report else None
        source_errors(text, self.view.errors_for(HOST_SOURCES))
        if not h:
            text.append("host not read", style="dim")
            return text
        h = self.steady.figures("host", h)
        past = self.view.host_columns("cpu_busy_ratio")
        meter(text, "CPU", self.hold("cpu", h.get("cpu_busy_ratio")), width, past)
        bt = h.get("busiest_thread")
        busiest = (
            "-"
            if not bt
            else f"{bt['name']} (pid {bt['pid']}) {fmt.pct(bt.get('cpu_ratio'), 0)} of a core"
        )
        text.append(
            f"{h.get('cpu_count')} CPUs · steal {fmt.pct(h.get('cpu_steal_ratio'), 0)} · engine "
            f"{fmt.num(h.get('engine_cpu_cores'), '.2f')} cores · busiest thread {busiest}\n"
        )
        return text


class Notice(Widget):
    """Lines shown only while there is something to say: hidden when empty, repainted only
    when the text changes."""

    def __init__(self, id: str) -> None:
        super().__init__(id=id)
        self.view = View()
        self._shown: Text | None = None

    def update_view(self, view: View) -> None:
        self.view = view
        text = self.render()
        if text == self._shown and self.display == bool(text.plain):
            return  # nothing to repaint
        shown, self._shown = self._shown, text
        width, console = self.content_size.width, self.app.console
        if shown is not None and width and self.display == bool(text.plain):
            if len(screen_lines(shown, width, console)) == len(screen_lines(text, width, console)):
                self.refresh()  # the same height: this widget alone, no layout
                return
        self.display = bool(text.plain)
        self.refresh(layout=True)

    def render(self) -> Text:
        raise NotImplementedError


class SectionNotice(Notice):
    """A source family's errors, in the place its panels would be (the rest keeps updating)."""

    DEFAULT_CSS = "SectionNotice { height: auto; }"

    def __init__(self, sources: Sequence[str], empty: str, id: str) -> None:
        super().__init__(id=id)
        self.sources = tuple(sources)
        self.empty = empty

    def render(self) -> Text:
        text = Text()
        source_errors(text, self.view.errors_for(self.sources))
        present = self.view.gpus() if self.sources == GPU_SOURCES else self.view.engines()
        if self.view.report is not None and not present and not text:
            text.append(self.empty, style="dim")
        text.rstrip()
        return text


class NotesPanel(Notice):
    DEFAULT_CSS = "NotesPanel { height: auto; }"

    def render(self) -> Text:
        text = Text()
        rep = self.view.report
        if rep:
            known = set(GPU_SOURCES + ENGINE_SOURCES + HOST_SOURCES)
            source_errors(text, [e for e in rep.get("errors", ()) if e.get("source") not in known])
            for note in rep.get("notes", ()):
                text.append(f"note: {note}\n", style="dim")
        text.rstrip()
        return text
