"""The fleet as text: one row per host, then its GPUs, engines and verdicts, indented."""

from __future__ import annotations

from urllib.parse import urlsplit

from monitor.fleet.model import Fleet, FleetHost

HEADER = (
    f"{'HOST / GPU / ENGINE':<34} {'WASTED':>6}  {'CAUSE':<14} {'CONF':>4} "
    f"{'DUTY':>5} {'SM':>5} {'RUN':>6} {'WAIT':>6} {'KV':>5}"
)
# Requests/s more each host (and engine) completes at its first limit than now.
SPARE_HEADER = f" {'SPARE/S':>7}"
# With a price: the waste in money an hour, the GPUs' power and energy per token.
ENERGY_HEADER = f" {'$/HOUR':>8} {'POWER':>7} {'J/TOK':>7}"


def spare_cell(v: float | None) -> str:
    return f" {num(v, 2):>7}"


def money(v: float | None) -> str:
    return "-" if v is None else f"${v:,.2f}"


def watts(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f} W"


def energy_cells(cost: float | None, power: float | None, per_token: float | None) -> str:
    return f" {money(cost):>8} {watts(power):>7} {num(per_token, 3) if per_token is not None else '-':>7}"


def pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.0f}%"


def num(v: float | None, digits: int = 1) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def count(n: int | float | str, word: str) -> str:
    """ "1 GPU", "2 GPUs", "0.5 GPUs": the noun agrees with the number as shown."""
    shown = n if isinstance(n, str) else f"{n:g}"
    return f"{shown} {word}" + ("" if shown in ("1", "1.0") else "s")


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "~"


def _row(name: str, wasted: str, cause: str, conf: str, duty: str, sm: str, run: str,
         wait: str, kv: str) -> str:  # fmt: skip
    return (
        f"{_clip(name, 34):<34} {wasted:>6}  {_clip(cause, 14):<14} {conf:>4} "
        f"{duty:>5} {sm:>5} {run:>6} {wait:>6} {kv:>5}"
    ).rstrip()


def host_age(h: FleetHost) -> str:
    if h.note:
        return h.note
    if h.last_tick_age_s is None:
        return "no tick from its agent in the last hour"
    age = f"last tick {h.last_tick_age_s:.0f} s ago"
    return age if h.present else f"agent gone from Prometheus, {age}"


def host_cells(h: FleetHost) -> tuple[str, str, str, str, str, str, str, str]:
    """A host's figures as the table and the fleet screen show them: wasted GPUs, its top
    cause and confidence, duty, SM active, running, waiting, KV cache."""
    top = h.verdict
    return (
        num(h.wasted),
        top.cause if top else "-",
        num(top.confidence, 2) if top else "-",
        pct(h.mean("util")),
        pct(h.mean("sm_active")),
        num(h.engine_sum("running")),
        num(h.engine_sum("waiting")),
        pct(h.engine_max("kv_cache_usage")),
    )


def host_lines(h: FleetHost, detail: bool = True) -> list[str]:
    label = h.instance or "(no host label)"
    if h.stale:
        label += " (stale)"
    lines = [
        _row(label, *host_cells(h))
        + spare_cell(h.spare_rps)
        + energy_cells(
            h.wasted_cost_per_hour, h.power_watts, h.engine_max("energy_per_token_joules")
        )
    ]
    if not detail:
        return lines
    for g in h.gpus:
        v = h.verdict_for(f"gpu:{g.gpu}")
        lines.append(
            _row(
                f"  gpu {g.gpu} {g.model}",
                num(g.wasted, 2),
                v.cause if v else "",
                num(v.confidence, 2) if v else "",
                pct(g.util),
                pct(g.sm_active),
                "",
                "",
                "",
            )
        )
    names = [f"{e.model_name}/{e.engine}" for e in h.engines]
    for e, name in zip(h.engines, names):
        v = h.verdict_for(e.scope)
        if names.count(name) > 1:  # two servers of one model on a box: tell them by port
            name += f" :{urlsplit(e.url).port or ''}"
        lines.append(
            _row(
                f"  {name}",
                "",
                v.cause if v else "",
                num(v.confidence, 2) if v else "",
                "",
                "",
                num(e.running),
                num(e.waiting),
                pct(e.kv_cache_usage),
            )
            + spare_cell(e.spare_rps)
        )
    if h.stale:
        lines.append(f"  ! stale: {host_age(h)}")
    return lines


def summary(fleet: Fleet) -> str:
    stale = sum(1 for h in fleet.hosts if h.stale)
    text = (
        f"{count(len(fleet.hosts), 'host')}, {count(fleet.gpu_count, 'GPU')}, "
        f"{count(fleet.engine_count, 'engine')}; "
        f"{count(num(fleet.wasted), 'GPU')} wasted (GPUs x (1 - SM active))"
    )
    if fleet.gpu_hour_price is not None:
        text += (
            f", {money(fleet.wasted_cost_per_hour)} an hour at "
            f"{money(fleet.gpu_hour_price)}/GPU-hour"
        )
    if fleet.spare_rps is not None:
        text += f"; {num(fleet.spare_rps, 2)} req/s spare (rate at each limit - today's)"
    if stale:
        text += f"; {stale} stale"
    return text


def render(fleet: Fleet, top: int | None = None, detail: bool = True) -> str:
    hosts = fleet.hosts if top is None else fleet.hosts[:top]
    lines = [
        f"headroom fleet from {fleet.source}: {summary(fleet)}",
        HEADER + SPARE_HEADER + ENERGY_HEADER,
    ]
    for h in hosts:
        lines.extend(host_lines(h, detail))
    if top is not None and len(fleet.hosts) > top:
        lines.append(f"... {count(len(fleet.hosts) - top, 'more host')} (--top)")
    return "\n".join(lines)
