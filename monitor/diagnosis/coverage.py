"""Which engine verdicts an engine's page lets the diagnosis make, and why not the others.

A stale or absent metric never errors and never reads 0: a verdict that needs it is
not made, and the report says which and why ("kv-cap: TGI 1.0-3.x exports no KV
gauge"), so a quiet diagnosis is not mistaken for a healthy one.
"""

from __future__ import annotations

from collections.abc import Mapping

from monitor.sources import metric_names as mn
from monitor.window.stats import ITERATION_TOKENS, EngineWindow

# Cause -> the fields (as in EngineWindow.missing) of which at least one must be read,
# per group: every group must be met.
_NEEDS: Mapping[str, tuple[tuple[str, ...], ...]] = {
    "kv-cap": (("kv_cache_usage", "preemptions"),),
    "seq-cap": (("running",), ("waiting",)),
    "starved": (("running",), ("waiting",)),
    "token-cap": (("step_tokens",),),
}

_WHAT = {
    "running": "running-requests gauge",
    "waiting": "waiting-requests gauge",
    "kv_cache_usage": "KV gauge",
    "preemptions": "preemption counter",
    "step_tokens": "tokens-per-step histogram",
}


def _read(e: EngineWindow, field: str) -> bool:
    """Whether the window holds a reading of the field."""
    if field == "running":
        return e.running_mean is not None
    if field == "waiting":
        return e.waiting_mean is not None
    if field == "kv_cache_usage":
        return e.kv_cache_usage_mean is not None
    if field == "preemptions":
        return e.preemptions_per_s is not None
    if field == "step_tokens":
        return e.histogram(ITERATION_TOKENS) is not None
    return True


def _who(e: EngineWindow) -> str:
    table = mn.table(e.flavour, e.flavour_version)
    return table.label if table is not None else e.flavour


def _looked(e: EngineWindow, field: str) -> tuple[str, ...]:
    """The server names tried for the field; empty when the server exports none."""
    looked = dict(e.missing).get(field)
    if looked is None:
        table = mn.table(e.flavour, e.flavour_version)
        canonicals = dict(mn.FIELDS).get(field, ())
        looked = mn.looked_for(table, canonicals) if table is not None else ()
    return looked


def why_missing(e: EngineWindow, field: str) -> str:
    """'TGI 1.0-3.x exports no KV gauge', or 'no KV gauge read (looked for ...)'."""
    what = _WHAT.get(field, field)
    looked = _looked(e, field)
    if not looked:
        return f"{_who(e)} exports no {what}"
    return f"no {what} read (looked for {', '.join(looked)})"


def _why_all(e: EngineWindow, fields: list[str]) -> str:
    """One sentence for several unread fields: those the server never exports together."""
    unexported = [f for f in fields if not _looked(e, f)]
    parts = []
    if unexported:
        parts.append(
            f"{_who(e)} exports " + " and ".join(f"no {_WHAT.get(f, f)}" for f in unexported)
        )
    parts += [why_missing(e, f) for f in fields if f not in unexported]
    return "; ".join(parts)


def unjudged(e: EngineWindow) -> list[dict[str, str]]:
    """The engine verdicts this window cannot support: [{"cause", "why"}]."""
    out = []
    for cause, groups in _NEEDS.items():
        lacking = [f for g in groups if not any(_read(e, f) for f in g) for f in g]
        if lacking:
            out.append({"cause": cause, "why": _why_all(e, lacking)})
    return out


def can_judge(e: EngineWindow, cause: str) -> bool:
    return all(any(_read(e, f) for f in g) for g in _NEEDS.get(cause, ()))
