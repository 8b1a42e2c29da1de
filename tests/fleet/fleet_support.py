"""A canned PromQL API on 127.0.0.1: answers each instant query from a table of series by the
headroom_* family the expression names, and records what it was asked (and with which
headers), so tests can check both the answers' handling and the questions."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs

from http_support import serving_handler

Series = tuple[Mapping[str, str], float]

EVAL_TIME = 1_800_000_000.0

# The families the fleet's expressions read, one per expression.
FAMILIES = (
    "headroom_gpu_utilization_ratio",
    "headroom_gpu_sm_active_ratio",
    "headroom_engine_requests_running",
    "headroom_engine_requests_waiting",
    "headroom_engine_kv_cache_usage_ratio",
    "headroom_engine_load_headroom_ratio",
    "headroom_engine_energy_per_token_joules",
    "headroom_gpu_energy_joules_total",
    "headroom_engine_first_limit",
    "headroom_diagnosis_confidence",
    "headroom_diagnosis_rank",
    "headroom_agent_last_tick_timestamp_seconds",
    "headroom_engine_rate_at_limit_requests_per_second",
    "headroom_engine_requests_per_second",
)
# The spare-capacity expression names two families (rate at the limit less today's rate):
# its canned answer is the difference, listed under this key.
SPARE = "spare"


def family_of(expr: str) -> str | None:
    return next((f for f in FAMILIES if re.search(rf"\b{f}(?![a-z_])", expr)), None)


@dataclass
class Canned:
    """What the server answers: ``series[family]`` (for the last-tick family, the value is the
    age in seconds, as the fleet's ``time() - ...`` expression yields; ``family[range]`` is
    what its ``max_over_time`` over the last hour answers), or a fixed ``mode``."""

    series: dict[str, list[Series]] = field(default_factory=dict)
    mode: str = "ok"  # ok | promql-error | html | 404 | 401
    asked: list[dict[str, Any]] = field(default_factory=list)

    def add(self, family: str, labels: Mapping[str, str], value: float) -> None:
        self.series.setdefault(family, []).append((dict(labels), value))


def _answer(canned: Canned, form: Mapping[str, Sequence[str]]) -> tuple[int, str, bytes]:
    expr = form.get("query", [""])[0]
    if canned.mode == "promql-error":
        body = {"status": "error", "errorType": "bad_data", "error": "parse error at char 7"}
        return 400, "application/json", json.dumps(body).encode()
    if canned.mode == "html":
        return 200, "text/html", b"<html><body>Grafana</body></html>"
    if canned.mode == "404":
        return 404, "text/plain", b"404 page not found"
    if canned.mode == "401":
        return 401, "text/plain", b"Unauthorized"
    when = float(form["time"][0]) if "time" in form else EVAL_TIME
    family = family_of(expr) or ""
    if "rate_at_limit" in expr and re.search(r"\)\s*-\s*max by", expr):
        family = SPARE
    if "max_over_time" in expr:
        family += "[range]"
    result = [
        {"metric": dict(labels), "value": [when, repr(value)]}
        for labels, value in canned.series.get(family, [])
    ]
    body = {"status": "success", "data": {"resultType": "vector", "result": result}}
    return 200, "application/json", json.dumps(body).encode()


@contextmanager
def serve(canned: Canned) -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            form = parse_qs(self.rfile.read(length).decode())
            self._reply(form)

        def do_GET(self) -> None:
            self._reply(parse_qs(self.path.partition("?")[2]))

        def _reply(self, form: Mapping[str, Sequence[str]]) -> None:
            canned.asked.append({"path": self.path.partition("?")[0], "form": form,
                                 "headers": dict(self.headers)})  # fmt: skip
            status, ctype, body = _answer(canned, form)
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    with serving_handler(Handler) as url:
        yield url


def host(
    canned: Canned,
    instance: str,
    sm: Sequence[float | None],
    util: float | None = 0.5,
    age: float | None = 1.0,
    verdicts: Sequence[tuple[str, str, float]] = (),
    ranked: bool = False,
    engines: Sequence[Mapping[str, Any]] = (),
    model: str = "NVIDIA H200",
    gone: bool = False,
    watts: float | None = None,
) -> None:
    """One host's series: a GPU per ``sm`` entry (None: no SM series for that GPU). ``gone``:
    the agent's last tick is only in the range query (its series ended), nothing else is.
    ``ranked``: the agent also exports its order, ``verdicts`` as listed."""
    base = {"instance": instance}
    if gone:
        if age is not None:
            canned.add("headroom_agent_last_tick_timestamp_seconds[range]", base, age)
        return
    for i, s in enumerate(sm):
        gpu = {**base, "gpu": str(i), "model": model}
        if util is not None:
            canned.add("headroom_gpu_utilization_ratio", gpu, util)
        if s is not None:
            canned.add("headroom_gpu_sm_active_ratio", gpu, s)
        if watts is not None:  # the energy counter's rate, as the fleet's expression asks
            canned.add("headroom_gpu_energy_joules_total", gpu, watts)
    for i, (cause, scope, confidence) in enumerate(verdicts):
        canned.add("headroom_diagnosis_confidence", {**base, "cause": cause, "scope": scope},
                   confidence)  # fmt: skip
        if ranked:
            canned.add("headroom_diagnosis_rank", {**base, "cause": cause, "scope": scope}, i)
    for e in engines:
        labels = {**base, "url": e.get("url", "http://127.0.0.1:8000/metrics"),
                  "model_name": e.get("model_name", "m"), "engine": "0"}  # fmt: skip
        for key, family in (
            ("running", "headroom_engine_requests_running"),
            ("waiting", "headroom_engine_requests_waiting"),
            ("kv", "headroom_engine_kv_cache_usage_ratio"),
            ("headroom", "headroom_engine_load_headroom_ratio"),
            ("j_per_token", "headroom_engine_energy_per_token_joules"),
        ):
            if key in e:
                canned.add(family, labels, e[key])
        if "at_limit" in e and "rps" in e:
            canned.add(SPARE, labels, e["at_limit"] - e["rps"])
        if "limit" in e:
            canned.add("headroom_engine_first_limit", {**labels, "limit": e["limit"]}, 1.0)
    if age is not None:
        canned.add("headroom_agent_last_tick_timestamp_seconds", base, age)
        canned.add("headroom_agent_last_tick_timestamp_seconds[range]", base, age)
