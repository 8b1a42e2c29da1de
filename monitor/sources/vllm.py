"""Serving-engine source: scrape vLLM's (or SGLang's) ``/metrics`` into EngineSamples.

One EngineSample per (model_name, engine) pair, so data-parallel engines stay
apart. Counters and histograms are passed on raw and cumulative: rates, resets
and quantiles are the window's job (``monitor.window``). Which Prometheus name
means what lives in ``monitor.sources.metric_names``.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from monitor.errors import ConfigError, EndpointError
from monitor.samples import EngineSample, Histogram, SourceError
from monitor.sources import metric_names as mn
from monitor.sources.base import Reading
from monitor.sources.engine_config import EngineConfigProbe, ReportedCaps
from monitor.sources.promtext import (
    Exposition,
    Sample,
    Scraper,
    display_url,
    expand_names,
    metrics_url,
    parse,
)

log = logging.getLogger(__name__)

Key = tuple[str, str]  # (model_name, engine)


def _engine_id(labels: Mapping[str, str], engine_labels: tuple[str, ...]) -> str | None:
    present = [(k, labels[k]) for k in engine_labels if k in labels]
    if not present:
        return None
    if len(engine_labels) == 1:
        return present[0][1]
    return ",".join(f"{k}={v}" for k, v in present)


def _key_order(key: Key) -> tuple[str, float, str]:
    model, engine = key
    return (model, float(engine) if engine.isdigit() else math.inf, engine)


@dataclass(slots=True)
class _Series:
    """Samples of one flavour grouped by sample name, then by engine key."""

    by_name: dict[str, dict[Key, list[Sample]]] = field(default_factory=dict)
    keys: list[Key] = field(default_factory=list)

    def at(self, name: str, key: Key) -> list[Sample]:
        return self.by_name.get(name, {}).get(key, [])


def _group(samples: Iterable[Sample], flavour: mn.Flavour) -> _Series:
    """Give each sample its engine key.

    A series without the engine label (vLLM's admission_rejections_total is per
    model) belongs to the model's first engine, so that summing over engines
    counts it once; one without the model label (cache_config_info) to the
    first engine with its engine label.
    """
    samples = list(samples)
    ids = [
        (s.labels.get(flavour.model_label), _engine_id(s.labels, flavour.engine_labels))
        for s in samples
    ]
    full = {(m, e) for m, e in ids if m is not None and e is not None}
    models_with_engine = {m for m, _ in full}
    full |= {(m, "") for m, e in ids if m is not None and e is None and m not in models_with_engine}
    keys = sorted(full, key=_key_order)

    def resolve(model: str | None, engine: str | None) -> Key:
        if model is not None and engine is not None:
            return (model, engine)
        for k in keys:
            if (model is None or k[0] == model) and (engine is None or k[1] == engine):
                return k
        return (model or "", engine or "")

    out = _Series()
    for s, (m, e) in zip(samples, ids):
        key = resolve(m, e)
        out.by_name.setdefault(s.name, {}).setdefault(key, []).append(s)
    seen = {k for per_key in out.by_name.values() for k in per_key}
    out.keys = sorted(seen, key=_key_order)
    return out


def _scalar(series: _Series, key: Key, sels: tuple[mn.Selector, ...]) -> float | None:
    for sel in sels:
        matching = [s.value for s in series.at(sel.name, key) if sel.matches(s.labels)]
        if matching:
            values = [v for v in matching if math.isfinite(v)]
            return sum(values) if values else None
    return None


def _histogram(series: _Series, key: Key, sels: tuple[mn.Selector, ...]) -> Histogram | None:
    for sel in sels:
        bucket_samples = [s for s in series.at(sel.name + "_bucket", key) if sel.matches(s.labels)]
        if not bucket_samples:
            continue
        buckets: dict[float, float] = {}
        for s in bucket_samples:
            try:
                le = float(s.labels.get("le", ""))
            except ValueError:
                continue
            if math.isnan(le):
                continue
            buckets[le] = buckets.get(le, 0.0) + s.value
        sums = [s.value for s in series.at(sel.name + "_sum", key) if sel.matches(s.labels)]
        counts = [s.value for s in series.at(sel.name + "_count", key) if sel.matches(s.labels)]
        count = sum(counts) if counts else buckets.get(math.inf)
        if not buckets or count is None:
            return None
        buckets.setdefault(math.inf, count)
        total = sum(sums) if sums else math.nan
        values = [*buckets.values(), count, total]
        if not all(math.isfinite(v) for v in values):
            return None
        return Histogram(buckets=tuple(sorted(buckets.items())), sum=total, count=count)
    return None


def _info(series: _Series, key: Key, flavour: mn.Flavour) -> tuple[tuple[str, str], ...]:
    for sel in flavour.candidates("cache_config_info"):
        for s in series.at(sel.name, key):
            if sel.matches(s.labels):
                return tuple(
                    sorted((k, v) for k, v in s.labels.items() if k not in flavour.info_skip_labels)
                )
    return ()


def _engine(series: _Series, key: Key, url: str, flavour: mn.Flavour) -> EngineSample:
    values = {
        name: _scalar(series, key, flavour.candidates(name)) for name in mn.GAUGES + mn.COUNTERS
    }
    if values["waiting"] is None:
        parts = [values["waiting_capacity"], values["waiting_deferred"]]
        present = [p for p in parts if p is not None]
        values["waiting"] = sum(present) if present else None
    hists = []
    for name in mn.HISTOGRAMS:
        h = _histogram(series, key, flavour.candidates(name))
        if h is not None:
            hists.append((name, h))
    return EngineSample(
        url=url,
        model_name=key[0],
        engine=key[1],
        histograms=tuple(hists),
        cache_config=_info(series, key, flavour),
        flavour=flavour.name,
        **values,
    )


_ALL_NAMES = expand_names(mn.all_metric_names())


# Per flavour, computed once: the sample names it reads, and each family's names.
_NAMES: dict[str, frozenset[str]] = {}
_FAMILIES: dict[str, tuple[frozenset[str], ...]] = {}


def _names_of(flavour: mn.Flavour) -> frozenset[str]:
    names = _NAMES.get(flavour.name)
    if names is None:
        names = _NAMES[flavour.name] = expand_names(flavour.metric_names())
    return names


def _hits(present: set[str], flavour: mn.Flavour) -> int:
    families = _FAMILIES.get(flavour.name)
    if families is None:
        families = tuple(expand_names((base,)) for base in sorted(flavour.metric_names()))
        _FAMILIES[flavour.name] = families
    return sum(1 for names in families if not names.isdisjoint(present))


def detect_flavour(exposition: Exposition) -> tuple[mn.Flavour, int]:
    """The flavour with the most families present, and how many it has."""
    present = exposition.names()
    hits = {f.name: _hits(present, f) for f in mn.FLAVOURS.values()}
    best = max(mn.FLAVOURS.values(), key=lambda f: hits[f.name])
    return best, hits[best.name]


def _not_served(text: str, url: str, flavour: mn.Flavour | None) -> EndpointError:
    shown = display_url(url)
    for f in mn.FLAVOURS.values() if flavour is None else (flavour,):
        if f"\n{f.prefix}" in text or text.startswith(f.prefix) or f" {f.prefix}" in text:
            return EndpointError(
                f"{shown} serves {f.prefix} metrics but none that headroom reads "
                f"(renamed in a newer {f.title}?)"
            )
    f = flavour or mn.VLLM
    return EndpointError(f"{shown} does not serve {f.title} metrics (no {f.prefix} families found)")


def engines_from_text(
    text: str, url: str, flavour: mn.Flavour | None = None
) -> tuple[tuple[EngineSample, ...], int]:
    """Parse one exposition into EngineSamples and the number of skipped lines.

    Raises EndpointError when the page is not a serving engine's metrics.
    """
    names = _ALL_NAMES if flavour is None else _names_of(flavour)
    exposition = parse(text, names)
    if flavour is None:
        chosen, hits = detect_flavour(exposition)
    else:
        chosen, hits = flavour, _hits(exposition.names(), flavour)
    if hits == 0:
        raise _not_served(text, url, flavour)
    mine = _names_of(chosen)
    series = _group((s for s in exposition.samples if s.name in mine), chosen)
    engines = tuple(_engine(series, key, url, chosen) for key in series.keys)
    return engines, exposition.skipped_lines


class VllmSource:
    """Reads one serving engine's ``/metrics`` per tick; never raises from ``read``."""

    name = "vllm"

    def __init__(
        self,
        url: str,
        timeout: float = 2.0,
        flavour: str | None = None,
    ) -> None:
        if not timeout > 0:
            raise ConfigError(f"HTTP timeout must be positive, not {timeout!r}")
        self.url = metrics_url(url, "vLLM")
        self.timeout = float(timeout)
        try:
            self._flavour = mn.flavour(flavour) if flavour is not None else None
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        self._scraper = Scraper(self.url, self.timeout)
        self.config = EngineConfigProbe(
            self.url.rsplit("/metrics", 1)[0], timeout=min(1.0, timeout)
        )
        self.notes: tuple[str, ...] = ()

    @property
    def flavour(self) -> str | None:
        """The forced flavour, or None when it is detected from each page."""
        return self._flavour.name if self._flavour is not None else None

    def _error(self, message: str) -> Reading:
        return Reading(errors=(SourceError(self.name, display_url(self.url), message),))

    def read(self) -> Reading:
        try:
            text = self._scraper.get()
            engines, skipped = engines_from_text(text, self.url, self._flavour)
        except EndpointError as exc:
            return self._error(str(exc))
        except Exception as exc:  # a bug must cost one reading, not the sampler
            log.warning("parsing %s failed", display_url(self.url), exc_info=True)
            return self._error(f"cannot read {display_url(self.url)}: {type(exc).__name__}: {exc}")
        errors: tuple[SourceError, ...] = ()
        if skipped:
            errors = (
                SourceError(
                    self.name,
                    display_url(self.url),
                    f"{display_url(self.url)}: skipped {skipped} malformed line(s)",
                ),
            )
        caps = self.config.caps()
        if caps is not None:
            engines = tuple(_with_caps(e, caps) for e in engines)
        return Reading(engines=engines, errors=errors)

    def close(self) -> None:
        self._scraper.close()


def _with_caps(e: EngineSample, caps: ReportedCaps) -> EngineSample:
    return dataclasses.replace(
        e,
        reported_max_num_seqs=caps.max_num_seqs,
        reported_max_num_batched_tokens=caps.max_num_batched_tokens,
        reported_caps_origin=caps.origin,
    )
