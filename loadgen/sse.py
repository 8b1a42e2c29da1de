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
_QUOTE_NL = frozenset(b'"\n')
# json.loads on bytes first guesses their encoding in Python; SSE is UTF-8 by definition.
_decode_json = json.JSONDecoder().decode
# Chunks that carry these need the full parse (usage counts, errors).
_NEEDS_PARSE = (b'"usage"', b'"error"')
# Template shapes the probes proved (SseParser._shape): a few per engine, kept while the
# process lives; a cap in case every stream brings a new one.
_PROVEN: set[tuple[bytes, bytes, bytes]] = set()
_PROVEN_MAX = 64


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


def _reads_as_token(pre: bytes, post: bytes) -> bool:
    """The probes: ``pre`` + a text + ``post`` decodes to a chunk whose text is that text (and
    none with an empty one), with no usage or error."""
    for probe, want in ((b"zq", "zq"), (b"", None)):
        try:
            obj = _decode_json((pre[5:] + probe + post).decode())
        except ValueError:
            return False
        if not isinstance(obj, dict) or obj.get("error") or isinstance(obj.get("usage"), dict):
            return False
        choices = obj.get("choices")
        got = _text_of(choices[0]) if choices and isinstance(choices[0], dict) else None
        if (got or None) != want:
            return False
    return True


class SseParser:
    """Feed bytes as they arrive; events complete at a blank line."""

    __slots__ = ("_buf", "state", "_keep", "_learnt", "_pre", "_post", "_npre", "_npost",
                 "_tail", "_ntail")  # fmt: skip

    def __init__(self, keep_text: bool = False) -> None:
        self._buf = b""
        self.state = StreamState()
        self._keep = keep_text
        self._learnt = keep_text  # kept text needs every event decoded: no template then
        # The stream's template: an event's bytes before and after its text (see _learn).
        self._pre: bytes | None = None
        self._post = b""
        self._npre = self._npost = 0
        # The template's end with the blank line that closes the event.
        self._tail = b""
        self._ntail = 0

    def feed(self, data: bytes, now: float) -> None:
        # (No `in` tests on bytes here: each raises and clears a TypeError inside CPython
        # 3.11, dearer than the search itself, and this runs for every token.)
        buf = self._buf + data if self._buf else data
        # Nearly every read is one whole event of the learnt shape: told by its two ends.
        # Neither end holds a newline and the text between holds none, so the blank line
        # at the end is the only one: one event, complete.
        pre = self._pre
        if (
            pre is not None
            and len(buf) >= self._npre + self._ntail
            and buf.startswith(pre)
            and buf.endswith(self._tail)
        ):
            mid = buf[self._npre : len(buf) - self._ntail]
            if _QUOTE_NL.isdisjoint(mid):
                self._buf = b""
                if mid:
                    self._token(now)
                return
        if buf.find(b"\r") >= 0:
            buf = buf.replace(b"\r\n", b"\n")
        events = buf.split(b"\n\n")
        self._buf = events.pop()  # what follows the last blank line: an event still arriving
        st = self.state
        pre, post, npre, npost = self._pre, self._post, self._npre, self._npost
        for raw in events:
            # An engine writes every chunk of a stream alike but for its text: the bytes
            # around it, learnt from one decoded chunk, tell the rest in a few compares.
            # Without a quote inside, what lies between is one JSON string: the text.
            if (
                pre is not None
                and raw[:npre] == pre
                and raw[-npost:] == post
                and len(raw) >= npre + npost
            ):
                mid = raw[npre : len(raw) - npost]
                if _QUOTE_NL.isdisjoint(mid):
                    if mid:
                        self._token(now)
                    continue
            had = st.token_events
            self._event(raw, now)
            if not self._learnt and st.token_events > had and st.error is None:
                self._learn(raw)
                pre, post, npre, npost = self._pre, self._post, self._npre, self._npost

    def _learn(self, raw: bytes) -> None:
        """Take a plain token event apart around its text, if the rest tells nothing more.

        Tried once a stream, on its first event with text. The split is kept only if
        decoding it back with another text, and with none, reads that text and no
        usage or error: so any event with the same bytes around a quote-free string
        is a token exactly when the string is not empty.
        """
        self._learnt = True
        if not raw.startswith(b"data:") or b"\n" in raw:
            return
        at = -1
        for opener in _TEXT_OPENERS:
            i = raw.find(opener)
            if i >= 0:
                at = i + len(opener)
                break
        if at < 0:
            return
        end = at  # the closing quote: the first one not escaped by a backslash
        while True:
            end = raw.find(b'"', end)
            if end < 0:
                return
            k = end
            while raw[k - 1] == 0x5C:
                k -= 1
            if (end - k) % 2 == 0:
                break
            end += 1
        pre, post = raw[:at], raw[end:]
        shape = self._shape(pre, post)
        if shape not in _PROVEN:  # (None never is)
            if not _reads_as_token(pre, post):
                return
            if shape is not None:
                if len(_PROVEN) >= _PROVEN_MAX:
                    _PROVEN.clear()
                _PROVEN.add(shape)
        self._pre, self._post, self._npre, self._npost = pre, post, len(pre), len(post)
        self._tail, self._ntail = post + b"\n\n", len(post) + 2

    def _shape(self, pre: bytes, post: bytes) -> tuple[bytes, bytes, bytes] | None:
        """The template less the response's id: (before the id, after it, after the text).

        Each stream of an engine has the same template but for its id (and a clock), so
        one proven shape spares the next streams' two probe decodes. Only an id that is a
        whole JSON string of its own, once in the bytes before the text and with nothing
        to escape, is left out: any other id of that kind leaves the JSON's structure as
        it was. None: no such id (the probes decide each time).
        """
        rid = self.state.response_id
        if rid is None or len(rid) < 8 or not rid.isascii() or not rid.isprintable():
            return None
        if '"' in rid or "\\" in rid:
            return None
        b = rid.encode()
        i = pre.find(b)
        j = i + len(b)
        if i < 1 or pre.find(b, j) >= 0 or pre[i - 1] != 0x22 or pre[j : j + 1] != b'"':
            return None
        return pre[:i], pre[j:], post

    def template(self) -> tuple[bytes, bytes, list[float]] | None:
        """(bytes before a text, bytes after it with the blank line, the gaps list) once the
        stream's shape is learnt and no event is half-read; else None. An event of exactly
        that shape around a text with no quote or newline is one token (see ``feed``)."""
        if self._pre is None or self._buf:
            return None
        return self._pre, self._tail, self.state.gaps

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
                obj = _decode_json(payload.decode())
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
        """One token event at ``now``: the first, or one more gap. (Where the C reader is built
        it counts most tokens itself; without it this runs for each.)"""
        st = self.state
        if st.first_token_at is None:
            st.first_token_at = now
        else:
            st.gaps.append(now - st.last_token_at)  # type: ignore[operator]
        st.last_token_at = now
        st.token_events += 1
