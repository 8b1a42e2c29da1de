"""A what-if in words, for the snapshot's text, the TUI and a cap verdict's fix.

Apart from monitor.diagnosis.whatif, which makes them, so that the report and the TUI read
these words without importing the diagnosis.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def _value(v: Any) -> str:
    return "?" if v is None else f"{v:g}" if isinstance(v, float) else str(v)


def whatif_text(w: Mapping[str, Any]) -> str:
    """ "raise --max-num-seqs 8 -> 16: ~1.8x tokens/s, then kv-cap at ~13 sequences"."""
    p = w["predicted"]
    if w["current"] is None:
        change = f"raise {w['flag']} x{w.get('scale', 0):.2g}"
    elif isinstance(w["proposed"], str):
        change = f"set {w['flag']} {w['proposed']} (was {w['current']})"
    else:
        change = f"raise {w['flag']} {_value(w['current'])} -> {_value(w['proposed'])}"
    gain = p.get("gain")
    c = p["concurrency"]
    # A change the diagnosis proposes gains at least 5%; one at no gain is listed only where
    # another limit (the engine's CPU) binds before the cap it raises.
    if gain is not None and gain <= 1.0:
        at = f"~{c:.0f}" if c >= 10 else f"~{c:.2g}"
        return f"{change} buys nothing: {p['limit']} binds first, at {at} sequences"
    text = f"{change}: ~{gain:.2g}x tokens/s" if gain is not None else change
    # Whole sequences past ten ("~13", not "~12.6"): the figure is an estimate.
    text += f", then {p['limit']} at ~{c:.0f}" if c >= 10 else f", then {p['limit']} at ~{c:.2g}"
    text += " sequences"
    growth = p.get("itl_growth")
    if growth is not None and growth >= 1.05:
        text += f" (ITL x{growth:.2g})"
    return text
