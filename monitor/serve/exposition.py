"""The agent's /metrics page, written without prometheus-client's per-sample checks.

prometheus-client writes each sample through a chain of name validation and escaping
calls meant for any name a library user might register: ~2.8 ms of the agent's CPU a
scrape on the H200 (bench/results/agent_parts_h200.txt), as much as a whole tick's
NVML reads. headroom's families have fixed names of Prometheus's classic character
set, so each name is checked once a page and every sample line written directly.

The output is byte for byte what prometheus-client writes, in its text format and in
OpenMetrics 1.0.0 (tests/agent/test_exposition.py holds the two side by side). What this
does not write (another type, a timestamp, an exemplar, a name outside the classic
set, another format or version) makes ``render`` answer None, and the caller lets
prometheus-client write the page.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

from prometheus_client.utils import floatToGoString

OPENMETRICS = "application/openmetrics-text"
TEXT = "text/plain"
_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
# The sample names a family of each type may hold (prometheus-client writes OpenMetrics'
# _created, _gsum and _gcount samples as families of their own in the text format).
_SUFFIXES = {
    "gauge": ("",),
    "counter": ("_total",),
    "info": ("_info",),
    "histogram": ("_bucket", "_count", "_sum"),
}


def render(metrics: Sequence[Any], content_type: str) -> bytes | None:
    """``metrics`` (a registry's collected families) as the page ``content_type`` names,
    or None where this module does not write what they hold."""
    kind = content_type.partition(";")[0].strip()
    if kind == OPENMETRICS:
        if "version=1.0.0" not in content_type:
            return None
        openmetrics = True
    elif kind == TEXT:
        openmetrics = False
    else:
        return None
    out: list[str] = []
    for metric in metrics:
        if not _plain(metric):
            return None
        _family(out, metric, openmetrics)
    if openmetrics:
        out.append("# EOF\n")
    return "".join(out).encode("utf-8")


# Label names already found to be of the classic set: checked once, not per sample.
_CHECKED_LABELS: set[str] = set()


def _plain(metric: Any) -> bool:
    suffixes = _SUFFIXES.get(metric.type)
    if suffixes is None or metric.unit or not _METRIC_NAME.fullmatch(metric.name):
        return False
    names = {metric.name + s for s in suffixes}
    checked = _CHECKED_LABELS
    for s in metric.samples:
        if s.name not in names or s.value is None:
            return False
        if s.timestamp is not None or s.exemplar is not None:
            return False
        if getattr(s, "native_histogram", None) is not None:
            return False
        for k in s.labels:
            if k not in checked:
                if not _LABEL_NAME.fullmatch(k):
                    return False
                if len(checked) < 1000:  # a bound, whatever labels a family brings
                    checked.add(k)
    return True


def _family(out: list[str], metric: Any, openmetrics: bool) -> None:
    doc = metric.documentation.replace("\\", r"\\").replace("\n", r"\n")
    name, kind = metric.name, metric.type
    if openmetrics:
        doc = doc.replace('"', r"\"")
    elif kind == "counter":
        name += "_total"
    elif kind == "info":
        name, kind = name + "_info", "gauge"
    out.append(f"# HELP {name} {doc}\n# TYPE {name} {kind}\n")
    out.extend(_lines(metric.samples))


def _lines(samples: Iterable[Any]) -> Iterable[str]:
    for s in samples:
        labels = s.labels
        if labels:
            inner = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items()))
            yield f"{s.name}{{{inner}}} {floatToGoString(s.value)}\n"
        else:
            yield f"{s.name} {floatToGoString(s.value)}\n"


def _escape(value: str) -> str:
    if "\\" in value or "\n" in value or '"' in value:
        return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
    return value
