"""Partial screen updates that write only the cells a widget asked to repaint.

Textual writes each dirty span of a line from the left edge of the widget under it (its
"chop") to the span's right end: a panel that repaints the two digits of a figure at
column 90 sends the 90 cells before them too, with their colours. The panels here already
say which cells changed, so this writes the span alone, starting at its first cell (bytes
on an SSH link: the status clock's seconds cost ~40 bytes, not the whole clock line).
"""

from __future__ import annotations

from typing import Any

from rich.color import ColorSystem
from rich.console import Console
from rich.control import Control
from textual._compositor import ChopsUpdate, Compositor
from textual.screen import Screen
from textual.strip import Strip


class TightChopsUpdate(ChopsUpdate):
    """Textual's partial update, cropped on the left to each span's first cell too."""

    def render_segments(self, console: Console) -> str:
        out = _Sgr(console)
        move_to = Control.move_to
        for y, x1, x2 in self.spans:
            line = self.chops[y]
            for end, (x, strip) in zip(self.chop_ends[y], line.items()):
                if strip is None or x >= x2 or end <= x1:
                    continue
                start = max(x, x1)
                if start > x and not _narrow(strip):
                    # A wide character may straddle the cut: write from the chop's start,
                    # as Textual does, rather than half a character.
                    start = x
                out.parts.append(move_to(start, y).segment.text)
                out.add(strip.crop(start - x, min(end, x2) - x))
        # No newline between lines (Textual's own adds one): every piece starts with an
        # absolute cursor move.
        return out.done()


class _Sgr:
    """Segments as terminal text, colours set only where they change: Textual sets them
    before each segment and resets them after it, ~25 bytes around a changed digit whose
    neighbours have the same colours. A cursor move keeps the colours in force."""

    def __init__(self, console: Console) -> None:
        self.parts: list[str] = []
        self.system = getattr(console, "_color_system", None) or ColorSystem.TRUECOLOR
        self.current = ""  # the SGR parameters in force; "" is the terminal's default

    def add(self, strip: Strip) -> None:
        parts = self.parts
        for text, style, _ in strip:
            if style is not None and style.link:
                self.set("")
                parts.append(Strip.render_style(style, text, self.system))  # ends in a reset
                continue
            if style is None:
                self.set("")
            else:
                # Textual keeps a style's parameters on it once worked out.
                ansi = getattr(style, "_ansi", None)
                self.set(Strip.render_ansi(style, self.system) if ansi is None else ansi)
            parts.append(text)

    def set(self, ansi: str) -> None:
        if ansi != self.current:
            self.parts.append(f"\x1b[0;{ansi}m" if ansi else "\x1b[0m")
            self.current = ansi

    def done(self) -> str:
        self.set("")  # leave the terminal as Textual expects it: no colours in force
        return "".join(self.parts)


def _narrow(strip: Strip) -> bool:
    """Whether every character of the strip takes one cell (so any cell is a safe cut)."""
    return len(strip.text) == strip.cell_length


class TightCompositor(Compositor):
    def render_partial_update(self) -> ChopsUpdate | None:
        update = super().render_partial_update()
        if update is None:
            return None
        return TightChopsUpdate(update.chops, update.spans, update.chop_ends)


def tighten(screen: Screen[Any]) -> None:
    """Give a screen, before it is mounted, the compositor that writes spans alone."""
    screen._compositor = TightCompositor()  # type: ignore[attr-defined]
