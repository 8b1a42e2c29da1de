"""The SSE parser sees bytes in whatever pieces the socket gives and keeps the token timeline."""

from __future__ import annotations

import json

import pytest

from loadgen.sse import SseParser


def _event(obj: object) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def _completion_stream(n: int, usage: bool = True) -> bytes:
    body = b"".join(_event({"choices": [{"index": 0, "text": f" w{i}"}]}) for i in range(n))
    if usage:
        body += _event({"choices": [], "usage": {"prompt_tokens": 11, "completion_tokens": n}})
    return body + b"data: [DONE]\n\n"


@pytest.mark.parametrize("piece", [1, 3, 7, 64, 10_000])
def test_any_split_gives_the_same_tokens_and_usage(piece: int) -> None:
    data = _completion_stream(5)
    p = SseParser()
    for i in range(0, len(data), piece):
        p.feed(data[i : i + piece], now=float(i))
    p.finish(now=1e9)
    st = p.state
    assert st.token_events == 5
    assert st.completion_tokens == 5 and st.prompt_tokens == 11
    assert st.done and st.error is None
    assert len(st.gaps) == 4


def test_timeline_uses_the_arrival_time_of_each_token() -> None:
    p = SseParser()
    p.feed(_event({"choices": [{"text": "a"}]}), now=1.0)
    p.feed(b"data: " + json.dumps({"choices": [{"text": "b"}]}).encode(), now=1.5)  # incomplete
    p.feed(b"\n\n", now=1.75)  # the event completes when its blank line arrives
    p.feed(_event({"choices": [{"text": "c"}]}) + _event({"choices": [{"text": "d"}]}), now=2.0)
    st = p.state
    assert st.first_token_at == 1.0
    assert st.gaps == [0.75, 0.25, 0.0]


def test_chat_role_chunk_is_not_a_token_and_crlf_is_accepted() -> None:
    p = SseParser()
    role = {"choices": [{"delta": {"role": "assistant", "content": ""}}]}
    tok = {"choices": [{"delta": {"content": "hi"}}]}
    p.feed(_event(role).replace(b"\n", b"\r\n"), now=1.0)
    p.feed(_event(tok).replace(b"\n", b"\r\n"), now=2.0)
    assert p.state.first_token_at == 2.0
    assert p.state.token_events == 1


def test_error_event_and_malformed_data_are_reported() -> None:
    p = SseParser()
    p.feed(_event({"error": {"message": "overloaded"}}), now=1.0)
    assert p.state.error == "stream error: overloaded"
    q = SseParser()
    q.feed(b"data: {not json\n\n", now=1.0)
    assert q.state.error is not None and "malformed" in q.state.error


def test_comments_and_a_last_event_without_blank_line() -> None:
    p = SseParser()
    p.feed(b": ping\n\n" + b"data: " + json.dumps({"choices": [{"text": "x"}]}).encode(), now=3.0)
    assert p.state.token_events == 0
    p.finish(now=4.0)
    assert p.state.token_events == 1 and p.state.first_token_at == 4.0


# -- the plain-chunk fast path must agree with decoding the chunk --------------------------


def _decoded_has_text(payload: bytes) -> bool:
    from loadgen.sse import _text_of

    obj = json.loads(payload)
    choices = obj.get("choices")
    return bool(choices and isinstance(choices[0], dict) and _text_of(choices[0]))


def _chunks(rng) -> bytes:
    """Chunks as vLLM, SGLang and others send them, compact or spaced, with awkward text."""
    texts = ["", " the", '"', '\\"', "text", '"text":"x', "\n", "é", "\u2028", " ", "{}", '":"']
    text = rng.choice(texts)
    kind = rng.choice(["completion", "chat", "role", "finish", "reasoning", "tool", "logprobs",
                       "usage", "error", "null-content", "empty-choices"])  # fmt: skip
    base: dict = {"id": "cmpl-1", "object": "chunk", "created": 1, "model": "m"}
    if kind == "completion":
        base["choices"] = [{"index": 0, "text": text, "logprobs": None, "finish_reason": None}]
    elif kind == "chat":
        base["choices"] = [{"index": 0, "delta": {"content": text}, "finish_reason": None}]
    elif kind == "role":
        base["choices"] = [{"index": 0, "delta": {"role": "assistant", "content": ""}}]
    elif kind == "finish":
        base["choices"] = [{"index": 0, "text": "", "finish_reason": "length"}]
    elif kind == "reasoning":
        key = rng.choice(["reasoning_content", "reasoning"])
        base["choices"] = [{"index": 0, "delta": {"content": rng.choice(["", None]), key: text}}]
    elif kind == "tool":
        call = {"index": 0, "function": {"name": "f", "arguments": '{"text":"' + text + '"}'}}
        base["choices"] = [{"index": 0, "delta": {"content": None, "tool_calls": [call]}}]
    elif kind == "logprobs":
        lp = {"content": [{"token": text, "logprob": -0.1, "top_logprobs": []}]}
        base["choices"] = [{"index": 0, "delta": {"content": text}, "logprobs": lp}]
    elif kind == "usage":
        base["choices"] = [{"index": 0, "text": text}]
        n = rng.randrange(1, 10_000)  # each differs: the last one read must be the one kept
        base["usage"] = {"prompt_tokens": 3, "completion_tokens": n, "total_tokens": n + 3}
    elif kind == "error":
        base = {"error": {"message": text or "boom", "type": "x", "code": 500}}
    elif kind == "null-content":
        base["choices"] = [{"index": 0, "delta": {"content": None}}]
    else:
        base["choices"] = []
    compact = rng.random() < 0.5
    return json.dumps(
        base,
        separators=(",", ":") if compact else (", ", ": "),
        ensure_ascii=rng.random() < 0.5,
    ).encode()


def test_plain_chunks_read_without_decoding_agree_with_decoding() -> None:
    import random

    from loadgen.sse import plain_token

    rng = random.Random(7)
    fast = 0
    for _ in range(5000):
        payload = _chunks(rng)
        got = plain_token(payload)
        if got is not None:
            fast += 1
            assert got == _decoded_has_text(payload), payload
    assert fast > 2000  # the fast path does take the common chunks


def test_a_stream_parses_the_same_with_and_without_the_fast_path(monkeypatch) -> None:
    import random

    import loadgen.sse as sse

    rng = random.Random(11)
    events = [_chunks(rng) for _ in range(400)]
    events = [e for e in events if b'"error"' not in e]
    data = b"".join(b"data: " + e + b"\n\n" for e in events) + b"data: [DONE]\n\n"

    def parse() -> sse.StreamState:
        p = SseParser()
        for i in range(0, len(data), 97):
            p.feed(data[i : i + 97], now=float(i))
        p.finish(now=1e9)
        return p.state

    with_fast = parse()
    monkeypatch.setattr(sse, "plain_token", lambda payload: None)
    without = parse()
    assert with_fast == without
    assert with_fast.token_events > 100 and with_fast.response_id == "cmpl-1"
