"""headroom's /metrics writer against prometheus-client's: the same bytes, in the text format
and in OpenMetrics, for every Accept header a scraper sends."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from agent_support import View
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)

from monitor.diagnosis import Diagnoser
from monitor.read.recording import read_recording
from monitor.serve.agent import _Collected
from monitor.serve.exporter import SelfStats, build_registry
from monitor.serve.exposition import render
from monitor.window.full import compute_window

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
RECORDINGS = sorted(
    [*(FIXTURES / "recordings").glob("*.jsonl"), *(FIXTURES / "gpu" / "h200").glob("*-1s.jsonl")]
)
# What scrapers send: none (curl), Prometheus's default (OpenMetrics first), and the
# variants prometheus-client answers with its escaping schemes.
ACCEPTS = [
    None,
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;"
    "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
    "text/plain;version=0.0.4",
    "text/plain;version=1.0.0;escaping=allow-utf-8",
    "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8",
    "application/openmetrics-text;version=1.0.0;escaping=underscores",
    "application/openmetrics-text",
]


def _same_as_the_library(metrics: list[Any]) -> int:
    """How many formats headroom wrote itself; each must equal prometheus-client's page."""
    written = 0
    for accept in ACCEPTS:
        encoder, content_type = choose_encoder(accept)  # type: ignore[arg-type]
        ours = render(metrics, content_type)
        if ours is not None:
            assert ours == encoder(_Collected(metrics)), (accept, content_type)
            written += 1
    return written


@pytest.mark.parametrize("path", RECORDINGS, ids=lambda p: p.name)
def test_every_recorded_box_is_written_as_prometheus_client_writes_it(path: Path) -> None:
    snaps = [t.snapshot for t in read_recording(path).ticks if t.snapshot is not None]
    window = compute_window(snaps[-11:])
    stats = SelfStats(wall=lambda: snaps[-1].wall)
    for snap in snaps:
        stats.on_snapshot(snap)
        stats.source_succeeded("nvml", "", snap.wall)
    registry = build_registry(View(window, Diagnoser().update(window)), stats, "1.2.3", 1.0, 10.0)
    metrics = list(registry.collect())
    assert sum(len(m.samples) for m in metrics) > 20
    # Every Accept header above gets headroom's own writing (none falls back).
    assert _same_as_the_library(metrics) == len(ACCEPTS)


_TEXT = st.text(st.characters(codec="utf-8"), max_size=12) | st.sampled_from(
    ['a"b', "back\\slash", "new\nline", "\\n", '"', "", "é", "x" * 40]
)
_VALUE = st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from(
    [0.0, -0.0, 1.0, 1e-7, 12345678901234.0, 2.0**53, 1e21, -1.5]
)
_NAME = st.from_regex(r"headroom_[a-z][a-z0-9_]{0,12}", fullmatch=True)
_LABEL = st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True).filter(
    lambda s: s != "le" and not s.startswith("__")
)


@st.composite
def _family(draw: st.DrawFn) -> Metric:
    kind = draw(st.sampled_from(["gauge", "counter", "info", "histogram"]))
    name, doc = draw(_NAME), draw(_TEXT)
    labels = draw(st.lists(_LABEL, max_size=3, unique=True))
    rows = draw(st.lists(st.tuples(*[_TEXT] * len(labels)), max_size=4, unique=True))
    if kind == "gauge":
        fam: Metric = GaugeMetricFamily(name, doc, labels=labels)
        for row in rows:
            fam.add_metric(list(row), draw(_VALUE))
    elif kind == "counter":
        fam = CounterMetricFamily(name.removesuffix("_total"), doc, labels=labels)
        for row in rows:
            fam.add_metric(list(row), abs(draw(_VALUE)))
    elif kind == "info":
        fam = InfoMetricFamily(name, doc, labels=labels)
        for row in rows:
            fam.add_metric(list(row), {"version": draw(_TEXT)})
    else:
        fam = HistogramMetricFamily(name, doc, labels=labels)
        for row in rows:
            bounds = sorted(set(draw(st.lists(st.floats(0, 100), max_size=4))))
            counts = sorted(draw(st.lists(st.integers(0, 1000), min_size=len(bounds) + 1,
                                          max_size=len(bounds) + 1)))  # fmt: skip
            buckets = [(repr(b), float(c)) for b, c in zip(bounds, counts)]
            buckets.append(("+Inf", float(counts[-1])))
            fam.add_metric(list(row), buckets, draw(_VALUE))
    return fam


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_family(), max_size=5))
def test_any_family_of_the_kinds_headroom_exports_is_written_alike(metrics: list[Metric]) -> None:
    assert _same_as_the_library(metrics) == len(ACCEPTS)


def test_what_it_does_not_write_is_left_to_the_library() -> None:
    _, text = choose_encoder("")  # type: ignore[arg-type]
    unit = GaugeMetricFamily("headroom_x_seconds", "doc", unit="seconds")
    unit.add_metric([], 1.0)
    utf8 = GaugeMetricFamily("headroom.x", "doc")
    utf8.add_metric([], 1.0)
    stamped = GaugeMetricFamily("headroom_y", "doc")
    stamped.add_metric([], 1.0, timestamp=5.0)
    for odd in (unit, utf8, stamped):
        assert render([odd], text) is None
    assert render([], "application/openmetrics-text; version=2.0.0; charset=utf-8") is None
    assert render([], "application/x-protobuf") is None
    assert math.isnan(float(render([_nan()], text).split()[-1]))  # type: ignore[union-attr]


def _nan() -> Metric:
    fam = GaugeMetricFamily("headroom_nan_ratio", "doc")
    fam.add_metric([], math.nan)
    return fam
