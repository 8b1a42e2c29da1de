"""Serving-engine source: scrape an engine's ``/metrics`` into EngineSamples.

The engine (vLLM, SGLang, TGI, TensorRT-LLM, Triton, llama.cpp) and the release
range of its names are found from the page, or forced with ``--engine``. One
EngineSample per (model, engine) pair, so data-parallel engines stay apart.
Counters and histograms are passed on raw and cumulative: rates, resets and
quantiles are the window's job (``monitor.window.full``). Which Prometheus name
means what lives in ``monitor.sources.metric_names``.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from urllib.parse import urlsplit

from monitor.core.errors import ConfigError, EndpointAnsweredError, EndpointError
from monitor.sources import metric_names as mn
from monitor.sources.base import Reading
from monitor.sources.engine_config import EngineConfigProbe, ReportedCaps
from monitor.sources.promtext import (
    Exposition,
    PageLayout,
    Sample,
    Scraper,
    display_url,
    expand_names,
    metrics_url,
    parse,
)
from monitor.sources.samples import EngineSample, Histogram, SourceError

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


def _ratio(series: _Series, key: Key, sel: mn.Selector) -> float | None:
    over = sel.over
    assert over is not None
    top = [s.value for s in series.at(sel.name, key) if sel.matches(s.labels)]
    bottom = [s.value for s in series.at(over.name, key) if over.matches(s.labels)]
    if not top or not bottom:
        return None
    num, den = sum(top), sum(bottom)
    if not (math.isfinite(num) and math.isfinite(den)) or den <= 0:
        return None
    return num / den


def _scalar(series: _Series, key: Key, sels: tuple[mn.Selector, ...]) -> float | None:
    for sel in sels:
        if sel.over is not None:
            value = _ratio(series, key, sel)
            if value is not None:
                return value
            continue
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
        flavour_version=flavour.version or None,
        **values,
    )


def _missing(
    engines: tuple[EngineSample, ...], flavour: mn.Flavour
) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The fields no engine of the page gives, and the names looked for.

    Per page, not per engine: SGLang's per-model counters sit on its first engine only,
    and a field one rank has is not missing from the server.
    """
    out = []
    for field_name, canonicals in mn.FIELDS:
        present = any(
            (e.histogram(c) if c in mn.HISTOGRAMS else getattr(e, c)) is not None
            for e in engines
            for c in canonicals
        )
        if not present:
            out.append((field_name, mn.looked_for(flavour, canonicals)))
    return tuple(out)


_ALL_NAMES = expand_names(mn.all_metric_names())


# Per flavour, computed once: the sample names it reads, and each family's names.
_NAMES: dict[str, frozenset[str]] = {}
_FAMILIES: dict[str, tuple[frozenset[str], ...]] = {}


def _names_of(flavour: mn.Flavour) -> frozenset[str]:
    names = _NAMES.get(_key(flavour))
    if names is None:
        names = _NAMES[_key(flavour)] = expand_names(flavour.metric_names())
    return names


def _hits(present: set[str], flavour: mn.Flavour) -> int:
    families = _FAMILIES.get(_key(flavour))
    if families is None:
        families = tuple(expand_names((base,)) for base in sorted(flavour.metric_names()))
        _FAMILIES[_key(flavour)] = families
    return sum(1 for names in families if not names.isdisjoint(present))


def _key(f: mn.Flavour) -> str:
    return f"{f.name} {f.version}"


def detect_flavour(
    exposition: Exposition, tables: tuple[mn.Flavour, ...] = mn.TABLES
) -> tuple[mn.Flavour, int]:
    """The table with the most families present, and how many it has.

    On a tie, the table that looks for fewer families in vain; then the one listed
    first (each engine's newest).
    """
    present = exposition.names()
    best, best_score = tables[0], (-1, 0)
    for t in tables:
        hits = _hits(present, t)
        # More families found first; then fewer looked for in vain, so that an older
        # release's smaller table wins over a newer superset its page only partly fills.
        score = (hits, hits - len(_FAMILIES[_key(t)]))
        if score > best_score:
            best, best_score = t, score
    return best, best_score[0]


def _engine_names(tables: tuple[mn.Flavour, ...]) -> frozenset[str]:
    key = "|".join(_key(t) for t in tables)
    names = _NAMES.get(key)
    if names is None:
        bases: set[str] = set()
        for t in tables:
            bases |= t.metric_names()
        names = _NAMES[key] = expand_names(bases)
    return names


def _not_served(text: str, url: str, tables: tuple[mn.Flavour, ...] | None) -> EndpointError:
    shown = display_url(url)
    for f in mn.TABLES if tables is None else tables:
        if f"\n{f.prefix}" in text or text.startswith(f.prefix) or f" {f.prefix}" in text:
            return EndpointError(
                f"{shown} serves {f.prefix} metrics but none that headroom reads "
                f"(renamed in a newer {f.title}?)"
            )
    if tables is not None:
        f = tables[0]
        return EndpointError(
            f"{shown} does not serve {f.title} metrics (no {f.prefix} families found)"
        )
    known = ", ".join(dict.fromkeys(t.title for t in mn.TABLES))
    return EndpointError(
        f"{shown} serves no serving engine's metrics that headroom knows ({known})"
    )


# One field's alternatives, in the table's order: (samples summed, None), or the ratio
# (samples summed, samples summed under it); indices into the page's samples.
_Alt = tuple[tuple[int, ...], tuple[int, ...] | None]


@dataclass(frozen=True, slots=True)
class _HistogramPlan:
    les: tuple[float, ...]  # each bucket's bound, in the order the page first gives it
    buckets: tuple[tuple[int, ...], ...]  # the samples summed into each bound's bucket
    sums: tuple[int, ...]
    counts: tuple[int, ...]
    # Each bucket's one sample where every bound has one and the bounds rise to +Inf.
    single: tuple[int, ...] | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        les = self.les
        if (
            les
            and all(len(at) == 1 for at in self.buckets)
            and all(a < b for a, b in zip(les, les[1:]))
            and les[-1] == math.inf
        ):
            object.__setattr__(self, "single", tuple(at[0] for at in self.buckets))

    def read(self, v: list[float]) -> Histogram | None:
        # The same arithmetic in the same order as _histogram, so both read alike to the bit.
        if self.single is not None:
            # One sample a bound, bounds rising to +Inf (one engine's page): no summing,
            # no sorting, the bucket's value as _histogram makes it (0.0 + value).
            cum = [0.0 + v[i] for i in self.single]
            count = sum([v[i] for i in self.counts]) if self.counts else cum[-1]
            total = sum([v[i] for i in self.sums]) if self.sums else math.nan
            if not (math.isfinite(count) and math.isfinite(total)):
                return None
            if not all(map(math.isfinite, cum)):
                return None
            return Histogram(buckets=tuple(zip(self.les, cum)), sum=total, count=count)
        buckets: dict[float, float] = {}
        for le, at in zip(self.les, self.buckets):
            acc = 0.0
            for i in at:
                acc = acc + v[i]
            buckets[le] = acc
        count = sum([v[i] for i in self.counts]) if self.counts else buckets.get(math.inf)
        if count is None:
            return None
        buckets.setdefault(math.inf, count)
        total = sum([v[i] for i in self.sums]) if self.sums else math.nan
        values = [*buckets.values(), count, total]
        if not all(math.isfinite(x) for x in values):
            return None
        return Histogram(buckets=tuple(sorted(buckets.items())), sum=total, count=count)


@dataclass(frozen=True, slots=True)
class _EnginePlan:
    """Which samples make each of one engine's fields: decided by the samples' names and
    labels alone, so a page repeating the last one's series is read from its numbers."""

    key: Key
    scalars: tuple[tuple[str, tuple[_Alt, ...]], ...]
    histograms: tuple[tuple[str, _HistogramPlan | None], ...]
    info: tuple[tuple[str, str], ...]

    def read(self, v: list[float], url: str, flavour: mn.Flavour) -> EngineSample:
        values = {name: _scalar_from(alts, v) for name, alts in self.scalars}
        if values["waiting"] is None:
            parts = [values["waiting_capacity"], values["waiting_deferred"]]
            present = [p for p in parts if p is not None]
            values["waiting"] = sum(present) if present else None
        hists = []
        for name, plan in self.histograms:
            h = plan.read(v) if plan is not None else None
            if h is not None:
                hists.append((name, h))
        return EngineSample(
            url=url,
            model_name=self.key[0],
            engine=self.key[1],
            histograms=tuple(hists),
            cache_config=self.info,
            flavour=flavour.name,
            flavour_version=flavour.version or None,
            **values,
        )


def _scalar_from(alts: tuple[_Alt, ...], v: list[float]) -> float | None:
    """_scalar on the numbers alone (its alternatives with no samples left out)."""
    for top, bottom in alts:
        if bottom is None:
            values = [x for x in (v[i] for i in top) if math.isfinite(x)]
            return sum(values) if values else None
        num, den = sum([v[i] for i in top]), sum([v[i] for i in bottom])
        if math.isfinite(num) and math.isfinite(den) and den > 0:
            return num / den
    return None


def _plan(
    samples: tuple[Sample, ...],
    places: dict[tuple[str, Key], tuple[int, ...]],
    key: Key,
    flavour: mn.Flavour,
) -> _EnginePlan:
    def picked(name: str, sel: mn.Selector) -> tuple[int, ...]:
        return tuple(i for i in places.get((name, key), ()) if sel.matches(samples[i].labels))

    scalars = []
    for name in mn.GAUGES + mn.COUNTERS:
        alts: list[_Alt] = []
        for sel in flavour.candidates(name):
            top = picked(sel.name, sel)
            if sel.over is None:
                if top:
                    alts.append((top, None))
                    break  # _scalar answers from the first selector with samples
            else:
                bottom = picked(sel.over.name, sel.over)
                if top and bottom:
                    alts.append((top, bottom))
        scalars.append((name, tuple(alts)))
    histograms = []
    for name in mn.HISTOGRAMS:
        plan: _HistogramPlan | None = None
        for sel in flavour.candidates(name):
            at = picked(sel.name + "_bucket", sel)
            if not at:
                continue
            bounds: dict[float, list[int]] = {}
            for i in at:
                try:
                    le = float(samples[i].labels.get("le", ""))
                except ValueError:
                    continue
                if not math.isnan(le):
                    bounds.setdefault(le, []).append(i)
            if bounds:
                plan = _HistogramPlan(
                    les=tuple(bounds),
                    buckets=tuple(tuple(b) for b in bounds.values()),
                    sums=picked(sel.name + "_sum", sel),
                    counts=picked(sel.name + "_count", sel),
                )
            break  # _histogram answers from the first selector with buckets
        histograms.append((name, plan))
    series = _Series(
        {n: {key: [samples[i] for i in at]} for (n, k), at in places.items() if k == key}, [key]
    )
    return _EnginePlan(key, tuple(scalars), tuple(histograms), _info(series, key, flavour))


@dataclass(slots=True)
class _Grouping:
    """What a page's series decided (its engine, and how each engine's fields are made
    from its samples), kept for the pages after it that repeat those series."""

    generation: int
    chosen: mn.Flavour
    plans: tuple[_EnginePlan, ...]


class PageMemo:
    """One URL's page layout and grouping: a page repeating the last one's series is
    read by its numbers alone (``promtext.PageLayout``), each engine's fields made
    from them as the last page's samples decided (``_EnginePlan``)."""

    def __init__(self) -> None:
        self.layout = PageLayout()
        self.grouping: _Grouping | None = None


def _grouping(samples: tuple[Sample, ...], chosen: mn.Flavour, generation: int) -> _Grouping:
    mine = _names_of(chosen)
    picked = [i for i, s in enumerate(samples) if s.name in mine]
    series = _group((samples[i] for i in picked), chosen)
    where = {id(samples[i]): i for i in picked}
    places = {
        (name, key): tuple(where[id(s)] for s in group)
        for name, per_key in series.by_name.items()
        for key, group in per_key.items()
    }
    plans = tuple(_plan(samples, places, key, chosen) for key in series.keys)
    return _Grouping(generation, chosen, plans)


def _with_missing(
    engines: tuple[EngineSample, ...], flavour: mn.Flavour
) -> tuple[EngineSample, ...]:
    missing = _missing(engines, flavour)
    if missing:
        engines = tuple(replace(e, missing=missing) for e in engines)
    return engines


def engines_from_text(
    text: str,
    url: str,
    flavour: mn.Flavour | tuple[mn.Flavour, ...] | None = None,
    memo: PageMemo | None = None,
) -> tuple[tuple[EngineSample, ...], int]:
    """Parse one exposition into EngineSamples and the number of skipped lines.

    ``flavour``: one table, an engine's tables (``--engine``), or None to detect the
    engine too. Raises EndpointError when the page is not a serving engine's metrics.
    ``memo``: the same URL's last page, read again faster where its series repeat.
    """
    tables = (flavour,) if isinstance(flavour, mn.Flavour) else flavour
    names = _ALL_NAMES if tables is None else _engine_names(tables)
    split = None
    if memo is not None:
        grouping = memo.grouping
        if grouping is not None and grouping.generation == memo.layout.generation:
            numbers, split = memo.layout.repeat(text, names)
            if numbers is not None:
                chosen = grouping.chosen
                engines = tuple(plan.read(numbers, url, chosen) for plan in grouping.plans)
                return _with_missing(engines, chosen), 0
    exposition = parse(text, names, memo.layout if memo is not None else None, split)
    chosen, hits = detect_flavour(exposition, tables or mn.TABLES)
    if hits == 0:
        raise _not_served(text, url, tables)
    if memo is not None:
        # This page's and the next ones' fields, while they repeat its series, are made
        # by the same plans (from the numbers alone).
        grouping = memo.grouping = _grouping(exposition.samples, chosen, memo.layout.generation)
        numbers = [s.value for s in exposition.samples]
        engines = tuple(plan.read(numbers, url, chosen) for plan in grouping.plans)
    else:
        mine = _names_of(chosen)
        series = _group((s for s in exposition.samples if s.name in mine), chosen)
        engines = tuple(_engine(series, key, url, chosen) for key in series.keys)
    return _with_missing(engines, chosen), exposition.skipped_lines


def _has_path(url: str) -> bool:
    raw = url.strip()
    path = urlsplit(raw if "://" in raw else "http://" + raw).path
    return path not in ("", "/")


class VllmSource:
    """Reads one serving engine's metrics page per tick; never raises from ``read``.

    ``flavour`` names the engine (``--engine``); None finds it from the page. A URL
    without a path is read at ``/metrics``, or at the engine's own path when it serves
    Prometheus text elsewhere (trtllm-serve: ``/prometheus/metrics``, its ``/metrics``
    being JSON): tried once when ``/metrics`` holds no engine's metrics, then kept.
    """

    name = "vllm"

    def __init__(
        self,
        url: str,
        timeout: float = 2.0,
        flavour: str | None = None,
    ) -> None:
        if not timeout > 0:
            raise ConfigError(f"HTTP timeout must be positive, not {timeout!r}")
        try:
            self._tables = mn.flavour(flavour) if flavour is not None else None
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        given_path = _has_path(url)
        self.url = metrics_url(url, "engine")
        self.timeout = float(timeout)
        # The other paths to try once when the default one serves no engine's metrics.
        self._alternatives: list[str] = []
        if not given_path:
            tables = self._tables or mn.TABLES
            for path in dict.fromkeys(t.path for t in tables):
                alt = self.url.rsplit("/metrics", 1)[0] + path
                if path != "/metrics":
                    self._alternatives.append(alt)
            if self._tables is not None and self._tables[0].path != "/metrics":
                # Forced to an engine that serves elsewhere: go there first.
                self.url = self._alternatives.pop(0)
        self._scraper = Scraper(self.url, self.timeout)
        self._memo = PageMemo()
        # The server's root: vLLM serves /server_info there, whatever path its metrics take.
        root = urlsplit(self.url)
        self.config = EngineConfigProbe(f"{root.scheme}://{root.netloc}", timeout=min(1.0, timeout))
        self.notes: tuple[str, ...] = ()

    @property
    def url(self) -> str:
        return self._url

    @url.setter
    def url(self, value: str) -> None:
        self._url = value
        # As readings, errors and logs show it (no credentials): made once, not every tick.
        self.shown_url = display_url(value)

    @property
    def flavour(self) -> str | None:
        """The forced engine, or None when it is found from each page."""
        return self._tables[0].name if self._tables is not None else None

    def _error(self, message: str) -> Reading:
        return Reading(errors=(SourceError(self.name, self.shown_url, message),))

    def _parse(self) -> tuple[tuple[EngineSample, ...], int]:
        answered = False
        try:
            text = self._scraper.get()
            answered = True
            # The URL as shown, credentials left out: it labels every series exported and
            # every line printed of this engine.
            found = engines_from_text(text, self.shown_url, self._tables, self._memo)
        except EndpointError as exc:
            # Only a server that answered (a page of no engine, an HTTP error) is asked at
            # the engines' own paths: one that is down or slow is not asked twice a tick.
            if answered or isinstance(exc, EndpointAnsweredError):
                elsewhere = self._try_alternatives()
                if elsewhere is not None:
                    return elsewhere
            raise  # the default page's error says most
        self._alternatives = []  # the default page is an engine's: stay there
        return found

    def _try_alternatives(self) -> tuple[tuple[EngineSample, ...], int] | None:
        for alt in self._alternatives:
            scraper = Scraper(alt, self.timeout)
            try:
                found = engines_from_text(scraper.get(), display_url(alt), self._tables)
            except EndpointError:
                scraper.close()
                continue
            log.info("%s: engine metrics found at %s", self.shown_url, display_url(alt))
            self._scraper.close()
            self._scraper, self.url, self._alternatives = scraper, alt, []
            self._memo = PageMemo()
            return found
        return None

    def read(self) -> Reading:
        return self._made(self._parse, self.config.caps)

    def read_later(self) -> Callable[[], Reading]:
        """The page fetched now, parsed when the reading is asked for (the sampler's
        digest_every_s): what the page said at this moment, read a few at a time.
        Readings must be made in the order they were fetched (the memo of the last page)."""
        if self._alternatives:
            # Not yet known to be the engine's page (it may be elsewhere): read it whole.
            reading = self.read()
            return lambda: reading
        try:
            text = self._scraper.get()
        except EndpointError as exc:
            failed = self._error(str(exc))
            return lambda: failed
        caps = self.config.caps()  # asks the server now and then: in the tick, not later
        url, tables, memo = self.shown_url, self._tables, self._memo
        return lambda: self._made(lambda: engines_from_text(text, url, tables, memo), lambda: caps)

    def _made(
        self,
        parse: Callable[[], tuple[tuple[EngineSample, ...], int]],
        caps: Callable[[], ReportedCaps | None],
    ) -> Reading:
        try:
            found = parse()
        except EndpointError as exc:
            return self._error(str(exc))
        except Exception as exc:  # a bug must cost one reading, not the sampler
            log.warning("parsing %s failed", self.shown_url, exc_info=True)
            return self._error(f"cannot read {self.shown_url}: {type(exc).__name__}: {exc}")
        return self._reading(found, caps())

    def _reading(
        self, found: tuple[tuple[EngineSample, ...], int], caps: ReportedCaps | None
    ) -> Reading:
        engines, skipped = found
        errors: tuple[SourceError, ...] = ()
        if skipped:
            errors = (
                SourceError(
                    self.name,
                    self.shown_url,
                    f"{self.shown_url}: skipped {skipped} malformed line(s)",
                ),
            )
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
