"""Before any load: is the target an OpenAI-compatible server, which model, does it stream?

httpx is fine here (a handful of requests); the load itself goes through Locust.
"""

from __future__ import annotations

import json
import os

import httpx

from monitor.core.errors import EndpointError


def api_key() -> str | None:
    return os.environ.get("HEADROOM_API_KEY") or os.environ.get("OPENAI_API_KEY")


def _headers() -> dict[str, str]:
    key = api_key()
    return {"Authorization": f"Bearer {key}"} if key else {}


def normalise_target(target: str) -> str:
    t = target.strip().rstrip("/")
    if "://" not in t:
        t = "http://" + t
    if t.endswith("/v1"):
        t = t[: -len("/v1")]
    return t


def _reason(exc: Exception) -> str:
    text = str(exc) or type(exc).__name__
    return text.splitlines()[0][:160]


def resolve_model(target: str, model: str | None, timeout: float = 10.0) -> str:
    """The model to load: checked against /v1/models, or its first entry when not given."""
    url = f"{target}/v1/models"
    try:
        resp = httpx.get(url, headers=_headers(), timeout=timeout)
    except httpx.HTTPError as exc:
        raise EndpointError(f"cannot reach {target}: {_reason(exc)}") from None
    if resp.status_code in (401, 403):
        raise EndpointError(
            f"{url} refused the request (HTTP {resp.status_code}): set HEADROOM_API_KEY or OPENAI_API_KEY"
        )
    try:
        data = resp.json()
        ids = [str(m["id"]) for m in data["data"]]
    except (ValueError, KeyError, TypeError):
        raise EndpointError(
            f"{target} is not an OpenAI-compatible endpoint: GET /v1/models gave HTTP "
            f"{resp.status_code} without a model list"
        ) from None
    if model is None:
        if not ids:
            raise EndpointError(f"{target} serves no models (GET /v1/models is empty)")
        return ids[0]
    if model not in ids:
        raise EndpointError(
            f"model {model!r} is not served by {target}; it serves: {', '.join(ids) or 'none'}"
        )
    return model


def probe_stream(target: str, model: str, api: str, timeout: float = 60.0) -> None:
    """One short streaming request: it must answer 200 and carry tokens as SSE."""
    path = "/v1/chat/completions" if api == "chat" else "/v1/completions"
    body: dict = {"model": model, "max_tokens": 4, "stream": True}
    if api == "chat":
        body["messages"] = [{"role": "user", "content": "Say hello."}]
    else:
        body["prompt"] = "Say hello."
    try:
        with httpx.stream(
            "POST", target + path, json=body, headers=_headers(), timeout=timeout
        ) as resp:
            if resp.status_code >= 400:
                text = resp.read().decode("utf-8", errors="replace").replace("\n", " ")[:200]
                raise EndpointError(f"POST {path} failed with HTTP {resp.status_code}: {text}")
            for line in resp.iter_lines():
                if not line.startswith("data:"):
                    continue
                payload = line[5:].strip()
                if payload == "[DONE]":
                    break
                try:
                    obj = json.loads(payload)
                except ValueError:
                    continue
                if isinstance(obj, dict) and obj.get("choices"):
                    return
    except httpx.HTTPError as exc:
        raise EndpointError(f"POST {path} to {target} failed: {_reason(exc)}") from None
    raise EndpointError(
        f"POST {path} did not stream any tokens: not an OpenAI-compatible SSE endpoint"
    )
