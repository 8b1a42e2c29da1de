"""Energy and cost per token over a window: what the GPUs drew against what the engines made.

The box's energy is its physical GPUs' (a MIG instance has no reading of its own; its
GPU's counts all its instances): each GPU's counter increase over the window, or, where a
GPU has no counter but a power reading (dcgm-exporter without the energy field), its mean
power times the window ("power"). A GPU with neither (a MIG instance alone) leaves the
figures None, a dash, never 0, and is named in ``missing``.

Per token and per request, the box's energy is set against every engine's tokens and
requests together: engines sharing GPUs cannot be told apart by the GPUs' readings, so
each engine is shown the box's figure.

Cost: a price per GPU-hour (``--gpu-hour-price``, ``HEADROOM_GPU_HOUR_PRICE``) times the
GPUs and the window's hours, over the tokens made: the cost of a million tokens at this
load. The idle part of the bill (a GPU held but unused) is the power it draws and, with a
price, the hours it is paid for.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from monitor.core.errors import ConfigError
from monitor.window.scopes import gpu_scope
from monitor.window.stats import EngineWindow, GpuWindow, WindowStats

PRICE_ENV = "HEADROOM_GPU_HOUR_PRICE"


def parse_price(text: str | float | None, what: str = "--gpu-hour-price") -> float | None:
    """A price per GPU-hour: a finite number >= 0, or None when not given."""
    if text is None or (isinstance(text, str) and not text.strip()):
        return None
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise ConfigError(f"{what} must be a number (a price per GPU-hour), not {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise ConfigError(f"{what} must be a price per GPU-hour >= 0, not {text!r}")
    return value


def price_from(flag: str | float | None, env: Mapping[str, str] | None = None) -> float | None:
    """The flag's price, else ``HEADROOM_GPU_HOUR_PRICE``'s; None when neither is set."""
    if flag is not None:
        return parse_price(flag)
    env = os.environ if env is None else env
    return parse_price(env.get(PRICE_ENV), PRICE_ENV)


def physical_gpus(gpus: Sequence[GpuWindow]) -> list[GpuWindow]:
    """The boards: MIG instances only where their GPU is not read itself."""
    parents = {g.index for g in gpus if g.mig_parent is None}
    return [g for g in gpus if g.mig_parent is None or g.mig_parent not in parents]


def gpu_energy(g: GpuWindow, duration_s: float) -> tuple[float | None, str | None]:
    """One GPU's joules over the window and where they come from."""
    if g.energy_joules is not None:
        return g.energy_joules, g.energy_source or "counter"
    if g.power_watts is not None and duration_s > 0:
        return g.power_watts * duration_s, "power"
    return None, None


@dataclass(frozen=True, slots=True)
class Energy:
    """The box over one window. None: not known (a dash), never 0."""

    duration_s: float
    gpus: int  # boards counted
    joules: float | None
    power_watts: float | None  # joules over the window's duration
    source: str | None  # "counter", "power" or "counter+power"
    missing: tuple[str, ...]  # GPUs without any reading (MIG instances alone, ...)
    tokens: float | None  # generated, every engine together
    requests: float | None
    price_per_gpu_hour: float | None = None

    @property
    def joules_per_token(self) -> float | None:
        return _per(self.joules, self.tokens)

    @property
    def joules_per_request(self) -> float | None:
        return _per(self.joules, self.requests)

    @property
    def tokens_per_joule(self) -> float | None:
        return _per(self.tokens, self.joules)

    @property
    def cost_per_hour(self) -> float | None:
        """What the GPUs cost an hour at the price (held, busy or not)."""
        if self.price_per_gpu_hour is None or not self.gpus:
            return None
        return self.price_per_gpu_hour * self.gpus

    @property
    def cost_per_million_tokens(self) -> float | None:
        per_hour = self.cost_per_hour
        if per_hour is None or self.duration_s <= 0:
            return None
        cost = per_hour * self.duration_s / 3600.0
        return _per(cost * 1e6, self.tokens)

    def to_json(self) -> dict[str, object]:
        return {
            "window_s": _r(self.duration_s, 3),
            "gpus": self.gpus,
            "energy_joules": _r(self.joules, 1),
            "power_watts": _r(self.power_watts, 1),
            "source": self.source,
            "missing": list(self.missing),
            "generation_tokens": _r(self.tokens, 1),
            "requests": _r(self.requests, 2),
            "joules_per_token": _r(self.joules_per_token, 5),
            "joules_per_request": _r(self.joules_per_request, 3),
            "tokens_per_joule": _r(self.tokens_per_joule, 4),
            "gpu_hour_price": self.price_per_gpu_hour,
            "cost_per_hour": _r(self.cost_per_hour, 4),
            "cost_per_million_tokens": _r(self.cost_per_million_tokens, 4),
        }


def _per(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b <= 0:
        return None
    return a / b


def _r(v: float | None, nd: int) -> float | None:
    return None if v is None else round(float(v), nd)


def _engine_totals(
    engines: Sequence[EngineWindow], duration_s: float
) -> tuple[float | None, float | None]:
    def total(attr: str) -> float | None:
        rates = [getattr(e, attr) for e in engines]
        if not rates or any(r is None for r in rates):
            return None
        return sum(r * e.elapsed_s for r, e in zip(rates, engines))  # type: ignore[operator]

    return total("generation_tokens_per_s"), total("requests_per_s")


def window_energy(window: WindowStats, price_per_gpu_hour: float | None = None) -> Energy:
    """The box's energy, power and cost over ``window``; see the module docstring."""
    duration = window.duration_s
    boards = physical_gpus(window.gpus)
    joules = 0.0
    sources: set[str] = set()
    missing = []
    unknown = False
    for g in boards:
        j, src = gpu_energy(g, duration)
        if j is None:
            unknown = True
            if g.energy_source is None and g.power_watts is None:
                missing.append(gpu_scope(g))  # no reading at all, not a window too short
            continue
        joules += j
        sources.add(src or "counter")
    known = bool(boards) and not unknown
    tokens, requests = _engine_totals(window.engines, duration)
    return Energy(
        duration_s=duration,
        gpus=len(boards),
        joules=joules if known else None,
        power_watts=joules / duration if known and duration > 0 else None,
        source="+".join(sorted(sources)) if known else None,
        missing=tuple(missing),
        tokens=tokens,
        requests=requests,
        price_per_gpu_hour=price_per_gpu_hour,
    )


def idle_bill(
    power_watts: float | None, price_per_gpu_hour: float | None, gpus: float = 1.0
) -> str:
    """The idle part of the bill in words: "85 W, 0.31 MJ an hour" and, with a price,
    ", $2.50 an hour at $2.50/GPU-hour"; "" when nothing is known."""
    parts = []
    if power_watts is not None:
        parts.append(f"{power_watts:.0f} W, {power_watts * 3600 / 1e6:.2f} MJ an hour")
    if price_per_gpu_hour is not None:
        parts.append(
            f"{money(price_per_gpu_hour * gpus)} an hour at {money(price_per_gpu_hour)}/GPU-hour"
        )
    return ", ".join(parts)


def money(v: float) -> str:
    return f"${v:,.2f}" if v >= 0.1 or v == 0 else f"${v:.4f}"
