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
