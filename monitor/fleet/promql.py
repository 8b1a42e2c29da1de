"""A small client for the PromQL instant-query API (Prometheus, Thanos, Mimir, VictoriaMetrics).

Every failure a user can cause (the server down, a URL that is not a PromQL API, a refused
token, a query the server rejects) becomes one EndpointError line. Credentials come from the
environment and never appear in a message: the URL is shown without its user-info part.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx

from monitor.core.errors import ConfigError, EndpointAnsweredError, EndpointError
from monitor.sources.promtext import display_url

TOKEN_ENV = "HEADROOM_PROMETHEUS_TOKEN"
USER_ENV = "HEADROOM_PROMETHEUS_USER"
PASSWORD_ENV = "HEADROOM_PROMETHEUS_PASSWORD"
ORG_ENV = "HEADROOM_PROMETHEUS_ORG_ID"  # Mimir, Cortex: the tenant (X-Scope-OrgID)


@dataclass(frozen=True, slots=True)
class Sample:
    labels: Mapping[str, str]
    value: float | None  # None for NaN: the series exists, its value does not


@dataclass(frozen=True, slots=True)
class Answer:
    samples: tuple[Sample, ...]
    time: float  # the evaluation time the server used


def base_url(url: str) -> str:
    """The API's root: a bare host gets http://, a pasted .../api/v1/query loses its path."""
    url = url.strip().rstrip("/")
    if "://" not in url:
        url = "http://" + url
    for tail in ("/api/v1/query", "/api/v1"):
        url = url.removesuffix(tail)
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"--prometheus needs an http(s) URL, not {display_url(url)!r}")
    return url


def _auth_from_env(env: Mapping[str, str]) -> tuple[dict[str, str], httpx.BasicAuth | None]:
    headers: dict[str, str] = {}
    auth = None
    if env.get(TOKEN_ENV):
        headers["Authorization"] = f"Bearer {env[TOKEN_ENV]}"
    elif env.get(USER_ENV):
        auth = httpx.BasicAuth(env[USER_ENV], env.get(PASSWORD_ENV, ""))
    if env.get(ORG_ENV):
        headers["X-Scope-OrgID"] = env[ORG_ENV]
    return headers, auth


class PromQL:
    """Instant queries against one API root, several at once on a small thread pool."""

    def __init__(
        self,
        url: str,
        timeout: float = 10.0,
        at: float | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.url = base_url(url)
        self.shown = display_url(self.url)
        self.at = at
        headers, auth = _auth_from_env(os.environ if env is None else env)
        parts = urlsplit(self.url)
        if parts.username is not None and auth is None and "Authorization" not in headers:
            auth = httpx.BasicAuth(parts.username, parts.password or "")
        self._endpoint = display_url(self.url) + "/api/v1/query"
        self._client = httpx.Client(timeout=timeout, headers=headers, auth=auth)

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> PromQL:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def query(self, expr: str) -> Answer:
        data: dict[str, str] = {"query": expr}
        if self.at is not None:
            data["time"] = f"{self.at:.3f}"
        try:
            # POST: a long selector does not hit a URL length limit; every PromQL API takes it.
            resp = self._client.post(self._endpoint, data=data)
        except httpx.TimeoutException:
            raise EndpointError(f"Prometheus at {self.shown} did not answer in time") from None
        except httpx.HTTPError as exc:
            reason = str(exc) or type(exc).__name__
            raise EndpointError(f"cannot reach Prometheus at {self.shown}: {reason}") from None
        return self._parse(resp, expr)

    def query_many(self, exprs: Mapping[str, str]) -> dict[str, Answer]:
        """Each named expression's answer; the queries run at once (they are independent)."""
        names = list(exprs)
        with ThreadPoolExecutor(max_workers=min(8, len(names)) or 1) as pool:
            answers = list(pool.map(lambda n: self.query(exprs[n]), names))
        return dict(zip(names, answers))

    def _parse(self, resp: httpx.Response, expr: str) -> Answer:
        try:
            body: Any = resp.json()
        except ValueError:
            body = None
        if not isinstance(body, dict) or body.get("status") not in ("success", "error"):
            if resp.status_code in (401, 403):
                raise EndpointAnsweredError(
                    f"Prometheus at {self.shown} refused the query: HTTP {resp.status_code} "
                    f"(set {TOKEN_ENV}, or {USER_ENV} and {PASSWORD_ENV})"
                )
            what = f"HTTP {resp.status_code}" if resp.status_code != 200 else "not PromQL JSON"
            raise EndpointAnsweredError(
                f"{self.shown} is not a Prometheus query API ({self._endpoint} answered {what})"
            )
        if body["status"] == "error":
            kind = body.get("errorType") or "error"
            raise EndpointAnsweredError(
                f"Prometheus at {self.shown} rejected a query ({kind}: {body.get('error')}): {expr}"
            )
        data = body.get("data") or {}
        if data.get("resultType") != "vector":
            raise EndpointAnsweredError(
                f"Prometheus at {self.shown} answered a {data.get('resultType')!r}, not a vector: {expr}"
            )
        samples = []
        when = self.at
        for item in data.get("result") or ():
            ts, raw = item["value"]
            when = float(ts) if when is None else when
            value = float(raw)
            samples.append(Sample(item.get("metric") or {}, None if math.isnan(value) else value))
        return Answer(tuple(samples), when if when is not None else float("nan"))


def selector_matchers(selector: str | None) -> str:
    """`job="headroom",env=~"prod.*"` or `{...}` -> the matchers to put inside braces."""
    if not selector:
        return ""
    s = selector.strip()
    if s.startswith("{") and s.endswith("}"):
        s = s[1:-1].strip()
    if not s or "=" not in s:
        raise ConfigError(f'--selector needs label matchers like job="headroom", not {selector!r}')
    return s
