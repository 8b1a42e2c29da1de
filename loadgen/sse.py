"""Incremental parsing of an OpenAI-compatible SSE stream (completions and chat).

Pure and gevent-free: the worker feeds it whatever bytes have arrived, stamped
with the time they arrived, and it keeps the per-request timeline (first
token, every gap) without ever waiting for more bytes than the socket gave.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field


@dataclass(slots=True)
class StreamState:
    """What one response stream said so far."""

    first_token_at: float | None = None
    last_token_at: float | None = None
    gaps: list[float] = field(default_factory=list)
    token_events: int = 0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    done: bool = False
    error: str | None = None
    # The server's id for the request ("cmpl-..."), to find it in the server's logs.
    response_id: str | None = None
    # The reply's text, kept only when asked for (a conversation carries it to the next turn).
    text: list[str] = field(default_factory=list)


def _text_of(choice: dict) -> str | None:
    # completions put text in "text"; chat in delta.content (or reasoning_content
    # for reasoning models, whose first tokens are still tokens).
    text = choice.get("text")
    if text:
        return text
    delta = choice.get("delta")
    if isinstance(delta, dict):
        for key in ("content", "reasoning_content", "reasoning"):
            v = delta.get(key)
            if v:
                return v
    return None


# Where a chunk's text starts, compact (vLLM, SGLang) or spaced (Python's json.dumps).
_TEXT_OPENERS = tuple(
    f'"{key}"{sep}"'.encode()
    for key in ("text", "content", "reasoning_content", "reasoning")
    for sep in (":", ": ")
)
# Chunks that carry these need the full parse (usage counts, errors).
_NEEDS_PARSE = (b'"usage"', b'"error"')


def plain_token(payload: bytes) -> bool | None:
    """Whether a plain chunk carries text, read without decoding it; None: decode to tell.

    Nearly every event of a stream is a plain chunk, one token of text, and decoding
    each one's JSON was most of the parser's cost. A plain chunk is an object with a
    text, content or reasoning string and no usage or error; a string key cannot be
    mimicked inside a JSON string value (its quotes would be escaped), so finding its
    opener finds the key. Anything else goes to the full parse.
    """
    if not (payload.startswith(b"{") and payload.endswith(b"}")):
        return None
    for marker in _NEEDS_PARSE:
        if marker in payload:
            return None
    seen = False
    for opener in _TEXT_OPENERS:
        at = payload.find(opener)
        if at >= 0:
            seen = True
            if payload[at + len(opener) : at + len(opener) + 1] != b'"':
                return True
    return False if seen else None


class SseParser:
    """Feed bytes as they arrive; events complete at a blank line."""

    __slots__ = ("_buf", "state", "_keep")

    def __init__(self, keep_text: bool = False) -> None:
        self._buf = b""
        self.state = StreamState()
        self._keep = keep_text

    def feed(self, data: bytes, now: float) -> None:
        buf = self._buf + data
        if b"\r" in buf:
            buf = buf.replace(b"\r\n", b"\n")
        while True:
            cut = buf.find(b"\n\n")
            if cut < 0:
                break
            self._event(buf[:cut], now)
            buf = buf[cut + 2 :]
        self._buf = buf

    def finish(self, now: float) -> None:
        """The body ended: an event without its trailing blank line still counts."""
        if self._buf.strip():
            self._event(self._buf, now)
        self._buf = b""

    def _event(self, raw: bytes, now: float) -> None:
        st = self.state
        for line in raw.split(b"\n"):
            if not line.startswith(b"data:"):
                continue  # comments (": ping"), event names, ids
            payload = line[5:].strip()
            if payload == b"[DONE]":
                st.done = True
                continue
            if not payload:
                continue
            if st.response_id is not None and not self._keep:
                token = plain_token(payload)
                if token is not None:
                    if token:
                        self._token(now)
                    continue
            try:
                obj = json.loads(payload)
            except ValueError:
                st.error = f"malformed SSE data: {payload[:80]!r}"
                continue
            if not isinstance(obj, dict):
                continue
            if st.response_id is None:
                rid = obj.get("id")
                if isinstance(rid, str):
                    st.response_id = rid[:128]
            if "error" in obj and obj["error"]:
                err = obj["error"]
                msg = err.get("message") if isinstance(err, dict) else str(err)
                st.error = f"stream error: {msg}"
                continue
            usage = obj.get("usage")
            if isinstance(usage, dict):
                if usage.get("prompt_tokens") is not None:
                    st.prompt_tokens = int(usage["prompt_tokens"])
                if usage.get("completion_tokens") is not None:
                    st.completion_tokens = int(usage["completion_tokens"])
            choices = obj.get("choices")
            text = _text_of(choices[0]) if choices and isinstance(choices[0], dict) else None
            if text:
                if self._keep:
                    st.text.append(text)
                self._token(now)

    def _token(self, now: float) -> None:
        st = self.state
        if st.first_token_at is None:
            st.first_token_at = now
        else:
            st.gaps.append(now - st.last_token_at)  # type: ignore[operator]
        st.last_token_at = now
        st.token_events += 1
