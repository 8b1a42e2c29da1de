"""Plain-text building blocks for the TUI: numbers, bars, sparklines, causes in words.

Pure functions of values, no Textual: every meaning is carried by characters
(a bar's length and its printed percentage, a label), so the screen reads the
same without colour (NO_COLOR) and the functions are easy to test.
"""

from __future__ import annotations

import collections
import math
import re
import time
from collections.abc import Mapping, Sequence
from typing import Any

DASH = "-"
_PARTIAL = " ▏▎▍▌▋▊▉"
_SPARK = "▁▂▃▄▅▆▇█"
TRACK = "·"

# What each cause means, in a few words a newcomer understands (headline, short label).
CAUSE_WORDS: dict[str, tuple[str, str]] = {
    "idle": ("Idle: no requests, nothing to do", "idle"),
    "starved": ("Starved: the engine has free slots but too little load arrives", "starved"),
    "seq-cap": ("Scheduler cap (sequences): requests queue at max_num_seqs", "seq cap"),
    "kv-cap": ("Scheduler cap (KV cache): requests queue because KV memory is full", "KV cap"),
    "token-cap": (
        "Scheduler cap (token budget): steps are pinned at the token budget",
        "token cap",
    ),
    "cpu-bound": ("CPU in the path: the GPU waits for the engine's CPU loop", "CPU-bound"),
    "launch-bound": (
        "Launch-bound: kernels run, but each uses a sliver of the GPU",
        "launch-bound",
    ),
    "small-kernels": (
        "Small kernels: busy all the time, but each kernel fills few SMs",
        "small kernels",
    ),
    "transfer-bound": (
        "Transfer-bound: the GPU waits on copies over PCIe or NVLink",
        "transfer-bound",
    ),
    "compute-bound": ("Saturated, compute-bound: tensor cores are busy", "compute-bound"),
    "memory-bound": ("Saturated, memory-bound: memory bandwidth is the limit", "memory-bound"),
    "comm-bound": ("Communication-bound: GPUs wait on each other", "comm-bound"),
    "contended": ("Contended: another process takes SM time on the engine's GPU", "contended"),
    "client-limited": ("Client-limited: the load generator cannot keep up", "client-limited"),
    "unknown": ("No clear cause yet", "unknown"),
}


def cause_headline(cause: str) -> str:
    return CAUSE_WORDS.get(cause, (cause, cause))[0]


def summary_after_headline(cause: str, summary: str) -> str:
    """The summary without a lead-in the headline above it already says ("Starved: ...")."""
    lead, sep, rest = summary.partition(": ")
    said = (cause_headline(cause).lower(), cause_label(cause).lower())
    if sep and (said[0].startswith(lead.lower()) or lead.lower() == said[1]):
        return rest[:1].upper() + rest[1:]
    return summary


def cause_label(cause: str) -> str:
    return CAUSE_WORDS.get(cause, (cause, cause))[1]


def pct(v: float | None, width: int = 4) -> str:
    """A 0-1 ratio as a percentage; a dash when unknown (never a fake 0)."""
    if v is None:
        return DASH.rjust(width)
    return f"{100 * v:.0f}%".rjust(width)


def num(v: float | None, spec: str = ".3g", unit: str = "") -> str:
    if v is None:
        return DASH
    return f"{v:{spec}}{unit}"


def si(v: float | None, unit: str = "", spec: str = ".3g") -> str:
    """1234567 -> '1.23M' (decimal prefixes, for rates and FLOP/s)."""
    if v is None:
        return DASH
    if not math.isfinite(v):
        return "inf" + unit
    mag = abs(v)
    # A unit gets a space before it ("9.3 TFLOP/s"); a bare count does not ("1.2k").
    sep = " " if unit else ""
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if mag >= factor:
            return f"{v / factor:{spec}}{sep}{prefix}{unit}"
    return f"{v:{spec}}{sep}{unit}"


def seconds(v: float | None) -> str:
    """A latency: ms below a second, s above."""
    if v is None:
        return DASH
    if v < 1.0:
        return f"{1000 * v:.3g} ms"
    return f"{v:.3g} s"


def duration(v: float | None) -> str:
    """How long something has lasted: '42 s', '3 min 5 s', '1 h 02 min'."""
    if v is None or v < 0:
        return DASH
    s = int(v)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s" if s % 60 else f"{s // 60} min"
    return f"{s // 3600} h {(s % 3600) // 60:02d} min"


def gib(v: float | None) -> str:
    return DASH if v is None else f"{v / 2**30:.1f}"


def clock(wall: float | None) -> str:
    return DASH if wall is None else time.strftime("%H:%M:%S", time.localtime(wall))


def bar(ratio: float | None, width: int) -> str:
    """A horizontal bar of ``width`` cells for a 0-1 ratio, in eighths; an unknown ratio is blank."""
    if width <= 0:
        return ""
    if ratio is None:
        return " " * width
    r = min(1.0, max(0.0, ratio))
    eighths = round(r * width * 8)
    full, part = divmod(eighths, 8)
    s = "█" * full
    if part and full < width:
        s += _PARTIAL[part]
    return s + TRACK * (width - len(s))


def sparkline(values: Sequence[float | None], width: int, top: float | None = 1.0) -> str:
    """The last ``width`` values as block characters, scaled to [0, top] (top None: the max seen).

    Ratios keep a fixed 0-1 scale so two sparklines side by side compare honestly.
    An unknown value is a blank cell.
    """
    if width <= 0:
        return ""
    vals = list(values)[-width:]
    scale = top
    if scale is None:
        present = [v for v in vals if v is not None]
        scale = max(present) if present else 0.0
    out = []
    for v in vals:
        if v is None:
            out.append(" ")
        elif scale <= 0:
            out.append(_SPARK[0])
        else:
            idx = int(min(1.0, max(0.0, v / scale)) * (len(_SPARK) - 1) + 0.5)
            out.append(_SPARK[idx])
    return "".join(out).rjust(width)


# Seconds of readings one sparkline column stands for. A column is drawn once its span has
# passed, so a sparkline shifts once in this many seconds, not on every reading (each shift
# rewrites the line: bytes on an SSH link), and 30 columns cover the app's five minutes.
SPARK_COLUMN_S = 10.0


def columns(
    times: Sequence[float | None],
    values: Sequence[float | None],
    span_s: float = SPARK_COLUMN_S,
) -> list[float | None]:
    """The mean of each whole ``span_s`` of readings, oldest first, for a sparkline.

    Spans are aligned to the clock (a reading at ``t`` falls in span ``t // span_s``), so the
    columns do not move between readings; the span the latest reading falls in is not over
    yet and is left out. A span without a reading is None (a blank cell, not a zero).
    """
    sums: dict[int, tuple[float, int]] = {}
    spans: list[int] = []
    for t, v in zip(times, values):
        if t is None:
            continue
        k = int(t // span_s)
        if not spans or k > spans[-1]:
            spans.append(k)
        if v is not None:
            total, n = sums.get(k, (0.0, 0))
            sums[k] = (total + v, n + 1)
    if len(spans) < 2:
        return []
    # A clock jump (a laptop asleep) leaves no thousands of blank columns behind.
    first, current = max(spans[0], spans[-1] - 64), spans[-1]
    out: list[float | None] = []
    for k in range(first, current):
        total, n = sums.get(k, (0.0, 0))
        out.append(total / n if n else None)
    return out


class ColumnCache:
    """``columns`` of figures over the app's history, kept from draw to draw.

    The history gains a reading at its end each draw and loses its oldest once full; a
    figure's sparkline worked out anew read every report of it (five minutes' worth, for
    each meter, every second). Here each reading is read once, and a span's mean is summed
    again only when it loses a reading, in the same order, so the columns are exactly
    ``columns(times, series(history, pick))``.
    """

    def __init__(self, span_s: float = SPARK_COLUMN_S) -> None:
        self.span_s = span_s
        self._folds: dict[Any, _Fold] = {}

    def __call__(
        self, key: Any, history: Sequence[Mapping[str, Any]], pick: Any
    ) -> list[float | None]:
        """The columns of ``pick`` over ``history``; ``key`` names the figure (one pick)."""
        fold = self._folds.get(key)
        if fold is None:
            fold = self._folds[key] = _Fold(pick, self.span_s)
        out = fold.update(history)
        if out is None:  # readings out of time order: no shortcut
            del self._folds[key]
            times = [r.get("time") for r in history]
            return columns(times, series(history, pick), self.span_s)
        return out


class _Fold:
    """One figure's readings as seen (report, span, value) and each span's (sum, count)."""

    def __init__(self, pick: Any, span_s: float) -> None:
        self.pick = pick
        self.span_s = span_s
        self.seen: collections.deque[tuple[Mapping[str, Any], int | None, float | None]] = (
            collections.deque()
        )
        self.sums: dict[int, tuple[float, int]] = {}
        self.last: int | None = None  # the latest span seen

    def update(self, history: Sequence[Mapping[str, Any]]) -> list[float | None] | None:
        seen, sums = self.seen, self.sums
        # The history goes on from what was seen: some reports gone from its front, new
        # ones at its end. Anything else (another history) is read anew.
        first = history[0] if history else None
        gone = next((i for i, item in enumerate(seen) if item[0] is first), len(seen))
        kept = len(seen) - gone
        if kept > len(history) or (kept and history[kept - 1] is not seen[-1][0]):
            seen.clear()
            sums.clear()
            self.last, gone, kept = None, 0, 0
        dirty = set()
        for _ in range(gone):
            _, k, v = seen.popleft()
            if k is not None and v is not None:
                dirty.add(k)
        if not seen:
            self.last = None
        for rep in history[kept:]:
            t = rep.get("time")
            try:
                v = self.pick(rep)
            except (KeyError, IndexError, TypeError):
                v = None
            v = float(v) if isinstance(v, (int, float)) else None
            k = None if t is None else int(t // self.span_s)
            if k is not None:
                if self.last is not None and k < self.last:
                    return None
                self.last = k
            seen.append((rep, k, v))
            if k is not None and v is not None:
                total, n = sums.get(k, (0.0, 0))
                sums[k] = (total + v, n + 1)
        for k in dirty:
            total, n = 0.0, 0
            for _, kk, v in seen:
                if kk is not None and kk > k:
                    break
                if kk == k and v is not None:
                    total, n = total + v, n + 1
            if n:
                sums[k] = (total, n)
            else:
                sums.pop(k, None)
        head = next((k for _, k, _ in seen if k is not None), None)
        current = self.last
        if head is None or current is None or head == current:
            return []
        out: list[float | None] = []
        for k in range(max(head, current - 64), current):
            total, n = sums.get(k, (0.0, 0))
            out.append(total / n if n else None)
        return out


class Steady:
    """Figures as shown: each stays as last shown while the reading keeps within ``tol`` of it.

    Readings jitter from tick to tick by less than a user reads (a point of utilization, a
    few watts); a figure that flickers on its last digit repaints its line every second and
    says nothing. What is shown is the reading rounded to ``digits`` when it was taken up.
    """

    def __init__(self) -> None:
        self.shown: dict[str, float] = {}
        self.records: dict[str, Mapping[str, Any]] = {}

    def __call__(self, key: str, value: float | None, tol: float, digits: int = 0) -> float | None:
        if value is None:
            self.shown.pop(key, None)
            return None
        shown = self.shown.get(key)
        if shown is None or abs(value - shown) > tol:
            shown = self.shown[key] = round(value, digits)
        return shown

    def verdict(self, key: str, v: Mapping[str, Any]) -> Mapping[str, Any]:
        """A verdict as shown: held whole (its summary and evidence read together) while
        every figure in them stays within what a user reads of it (a point of a ratio,
        2% or the last printed digit of a number) and all else is the same."""
        held = self.records.get(key)
        if held is None or _verdict_moved(held, v):
            held = self.records[key] = v
        return held

    # Records whose figures are read together (the headroom figure: factor x today's rate over
    # the growth is the rate shown): held whole, so one line never mixes two windows.
    WHOLE = ("headroom",)

    def _whole(self, key: str, rec: Mapping[str, Any], rel: float) -> Mapping[str, Any]:
        held = self.records.get(key)
        if held is None or _moved(held, rec, rel):
            held = self.records[key] = rec
        return held

    def figures(self, key: str, rec: Mapping[str, Any], rel: float = 0.02) -> dict[str, Any]:
        """A record (and the records in it) with each figure held within ``rel`` of itself:
        a rate or latency printed to three digits flickers on the last one every tick."""
        out: dict[str, Any] = {}
        for k, v in rec.items():
            if isinstance(v, Mapping) and k in self.WHOLE:
                out[k] = self._whole(f"{key}.{k}", v, rel)
            elif isinstance(v, Mapping):
                out[k] = self.figures(f"{key}.{k}", v, rel)
            elif isinstance(v, float) and not (k in ("time", "since") or k.endswith("_at")):
                shown = self.shown.get(f"{key}.{k}")
                if shown is None or abs(v - shown) > rel * abs(shown):
                    shown = self.shown[f"{key}.{k}"] = v
                out[k] = shown
            else:
                out[k] = v
        return out


def _moved(held: Mapping[str, Any], rec: Mapping[str, Any], rel: float) -> bool:
    """Whether any figure of ``rec`` is past ``rel`` of the one held (any other value changed)."""
    if held.keys() != rec.keys():
        return True
    for k, v in rec.items():
        old = held[k]
        if isinstance(v, float) and isinstance(old, float):
            if abs(v - old) > rel * abs(old):
                return True
        elif isinstance(v, Mapping) and isinstance(old, Mapping):
            if _moved(old, v, rel):
                return True
        elif v != old:
            return True
    return False


def _verdict_moved(held: Mapping[str, Any], v: Mapping[str, Any]) -> bool:
    if held.keys() != v.keys():
        return True
    for k, new in v.items():
        old = held[k]
        if k in ("summary", "fix") and isinstance(old, str) and isinstance(new, str):
            if _words_moved(old, new):
                return True
        elif k == "evidence":
            if len(old) != len(new) or any(_evidence_moved(a, b) for a, b in zip(old, new)):
                return True
        elif new != old:
            return True
    return False


def _evidence_moved(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    if {k: v for k, v in old.items() if k != "value"} != {
        k: v for k, v in new.items() if k != "value"
    }:
        return True
    a, b = old.get("value"), new.get("value")
    if not isinstance(a, (int, float)) or not isinstance(b, (int, float)):
        return a != b
    tol = 0.01 if new.get("unit") == "ratio" else 0.02 * abs(a)
    return abs(b - a) > tol


_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def _words_moved(old: str, new: str) -> bool:
    """Whether a sentence with figures in it reads differently: other words, or a figure
    moved by more than 2% and more than its last printed digit."""
    if _NUMBER.sub("#", old) != _NUMBER.sub("#", new):
        return True
    for a, b in zip(_NUMBER.findall(old), _NUMBER.findall(new)):
        digit = 10.0 ** -len(a.partition(".")[2])
        if abs(float(b) - float(a)) > max(digit, 0.02 * float(a)):
            return True
    return False


def series(history: Sequence[Mapping[str, Any]], pick: Any) -> list[float | None]:
    """One figure over a history of reports: ``pick(report)`` may return None or raise KeyError."""
    out: list[float | None] = []
    for rep in history:
        try:
            v = pick(rep)
        except (KeyError, IndexError, TypeError):
            v = None
        out.append(float(v) if isinstance(v, (int, float)) else None)
    return out


def scope_words(scope: str) -> str:
    """'engine:model/0@http://h:8000/metrics' -> 'engine model/0'; 'gpu:1' -> 'GPU 1'."""
    if scope.startswith("gpu:"):
        return "GPU " + scope[4:]
    if scope.startswith("engine:"):
        return "engine " + scope[7:].split("@", 1)[0]
    return scope


def evidence_words(e: Mapping[str, Any]) -> str:
    v = e.get("value")
    unit = e.get("unit") or ""
    if unit == "ratio" and isinstance(v, (int, float)):
        val = pct(v, 0)
        thr = e.get("threshold")
        thr_s = pct(thr, 0) if isinstance(thr, (int, float)) else None
        unit = ""
    else:
        val = DASH if v is None else f"{v:.3g}"
        thr = e.get("threshold")
        thr_s = f"{thr:.3g}" if isinstance(thr, (int, float)) else None
    name = str(e.get("name", "?")).replace("_", " ")
    tail = f" {unit}" if unit else ""
    if thr_s is None or not e.get("op"):
        return f"{name} {val}{tail}"
    return f"{name} {val} {e['op']} {thr_s}{tail}"


def clip(s: str, width: int) -> str:
    """Cut a line to ``width`` cells, marking the cut."""
    if width <= 1 or len(s) <= width:
        return s
    return s[: width - 1] + "…"


def short_url(url: str) -> str:
    for prefix in ("http://", "https://"):
        if url.startswith(prefix):
            url = url[len(prefix) :]
    if url.endswith("/metrics"):
        url = url[: -len("/metrics")]
    return url


def engine_key(e: Mapping[str, Any]) -> str:
    return f"{e.get('url', '')}#{e.get('model_name', '')}/{e.get('engine', '')}"


def placement(intensity: float | None, ridge: float | None, width: int) -> str:
    """Where a kernel mix sits between the memory and the compute roof, on a log scale.

    ``|`` marks the ridge point, ``●`` the engine; left of the ridge the memory
    bandwidth limits, right of it the compute.
    """
    if width < 5:
        return ""
    if not intensity or not ridge or intensity <= 0 or ridge <= 0:
        return TRACK * width
    # Two decades either side of the ridge fill the line.
    span = 2.0
    pos = (math.log10(intensity / ridge) + span) / (2 * span)
    cells = [TRACK] * width
    ridge_at = width // 2
    cells[ridge_at] = "|"
    at = int(min(1.0, max(0.0, pos)) * (width - 1) + 0.5)
    cells[at] = "●"
    return "".join(cells)
