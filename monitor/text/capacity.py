"""How much more load fits, in words: the headroom figure and the capacity line.

One wording for every face (the TUI's engine panel and capacity line, `snapshot`'s text), so a
rate that fills the cap reads the same wherever it is shown, and a rate that allows for longer
steps says so beside the one at today's request time.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

DASH = "-"
# Why a request rate is a dash: requests ran and none finished (they outlast the window).
NONE_FINISHED = "no request finished in the window"
# Below this a request's growth in time is within what one window can read: not worth a label.
GROWTH_SHOWN = 1.02


def _n(v: float | None) -> str:
    if v is None:
        return DASH
    return f"{v:.0f}" if abs(v) >= 1000 else f"{v:.3g}"


def longer(growth: float | None) -> str:
    """ "requests take 1.23x as long there": why the rate at a limit is not factor x today's."""
    if growth is None or growth < GROWTH_SHOWN:
        return ""
    # Three digits, as the rates beside it: factor x today's rate / this is the rate shown.
    return f"requests take {growth:.3g}x as long there"


def headroom_words(room: Mapping[str, Any] | None, none_finished: bool = False) -> str:
    """ "x6.16 before seq-cap: 64 running, 6.27 req/s, requests take 1.23x as long there".

    ``none_finished``: the window's requests ran and none finished (the analysis's
    littles_unjudged), the reason a rate is a dash."""
    if not room:
        return "- (no limit can be estimated from this window)"
    rate = room.get("rate_at_limit_rps")
    text = (
        f"x{room['factor']:.3g} before {room['limit']}: "
        f"{_n(room.get('concurrency_at_limit'))} running, {_n(rate)} req/s"
    )
    if rate is None:
        return f"{text} ({NONE_FINISHED})" if none_finished else text
    more = longer(room.get("latency_growth"))
    return f"{text}, {more}" if more else text


def capacity_words(a: Mapping[str, Any], how: str = "") -> str:
    """The sequence cap and the rate that fills it, from an engine's analysis.

    ``how``: where the cap came from (" reported", " inferred at 09:14:02")."""
    cap = a.get("seq_cap")
    if not cap:
        return "cap unknown: pass --max-num-seqs (or it is inferred once requests queue)"
    slots = f"{cap:.0f} slots{how}"
    room = a.get("headroom") or {}
    first = a.get("fill_first_limit")
    if first and room:
        # Another limit binds before the slots fill: no promise of a rate that fills them.
        return (
            f"{slots}: {first} binds first, at {_n(room.get('concurrency_at_limit'))} running "
            f"(x{room['factor']:.3g}): the slots will not fill"
        )
    if a.get("littles_unjudged") == "none-finished":
        return f"{slots}: - req/s would fill them ({NONE_FINISHED})"
    rate = a.get("fill_rate_at_cap_rps")
    today = a.get("fill_rate_rps")
    if rate is None:
        rate, growth = today, None
    else:
        growth = a.get("fill_latency_growth")
    text = f"{slots}: {_n(rate)} req/s would fill them"
    if rate is None and not a.get("littles_in_flight"):
        return f"{text} (nothing ran in the window to time a request by)"
    more = longer(growth)
    notes = []
    if more:
        text += f", {more}"
        notes.append(f"{_n(today)} at today's request time")
    rps, share = a.get("requests_per_s"), a.get("fill_share")
    if rps is not None and share is not None:
        notes.append(f"now {_n(rps)} req/s, {100 * share:.0f}% of the slots busy")
    return text + (f" ({'; '.join(notes)})" if notes else "")
