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


# -- the stream template: chunks read by their bytes around the text ------------------------


def _vllm_like(
    n: int, chat: bool = False, usage: bool = True, texts: list[str] | None = None
) -> bytes:
    """A stream as vLLM and the simulator write it: compact chunks alike but for the text."""
    head = {"id": "cmpl-7", "object": "chunk", "created": 5, "model": "m"}
    out = []
    if chat:
        out.append(
            {**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
        )
    for i in range(n):
        t = texts[i % len(texts)] if texts else f" w{i}"
        choice = {"index": 0, "delta": {"content": t}} if chat else {"index": 0, "text": t}
        out.append({**head, "choices": [{**choice, "logprobs": None, "finish_reason": None}]})
    if usage:
        out.append({**head, "choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": n}})
    return (
        b"".join(b"data: " + json.dumps(o, separators=(",", ":")).encode() + b"\n\n" for o in out)
        + b"data: [DONE]\n\n"
    )


def _parse_in_pieces(data: bytes, cuts: list[int], keep: bool = False) -> SseParser:
    p = SseParser(keep_text=keep)
    prev = 0
    for k, c in enumerate([*cuts, len(data)]):
        p.feed(data[prev:c], now=float(k))
        prev = c
    p.finish(now=1e6)
    return p


@pytest.mark.parametrize("chat", [False, True])
def test_every_cut_of_a_stream_counts_the_same(chat: bool) -> None:
    """A chunk boundary anywhere (inside a key, the text, the blank line) changes no count."""
    data = _vllm_like(6, chat=chat, texts=[" a", "é", "\\", "\u2028", " b", "x y"])
    whole = _parse_in_pieces(data, []).state
    assert whole.token_events == 6 and whole.completion_tokens == 6 and whole.prompt_tokens == 4
    assert whole.done and whole.error is None and whole.response_id == "cmpl-7"
    for cut in range(1, len(data)):
        st = _parse_in_pieces(data, [cut]).state
        assert (st.token_events, st.completion_tokens, st.done, st.error) == (6, 6, True, None), cut


def test_many_events_in_one_read_each_count_at_that_read() -> None:
    data = _vllm_like(10)
    p = SseParser()
    first_three = data.index(b"\n\n", data.index(b"w2")) + 2
    p.feed(data[:first_three], now=1.0)  # three tokens arrive together
    p.feed(data[first_three:], now=2.0)  # the other seven, the usage and [DONE]
    st = p.state
    assert st.token_events == 10 and st.first_token_at == 1.0 and st.last_token_at == 2.0
    assert st.gaps == [0.0, 0.0, 1.0] + [0.0] * 6
    assert st.completion_tokens == 10 and st.done


def test_chunks_unlike_the_template_are_decoded() -> None:
    """Once the template is learnt, a chunk with usage, an error, an empty or quoted text
    or another shape still reads right."""
    head = '{"id":"cmpl-7","object":"chunk","created":5,"model":"m","choices":[{"index":0,"text":'
    tail = ',"logprobs":null,"finish_reason":null}]}'
    events = [
        head + '" a"' + tail,  # learnt here
        head + '" b"' + tail,
        head + '""' + tail,  # empty text: no token
        head + '"say \\"hi\\""' + tail,  # quotes inside: decoded, a token
        head + '" c"' + ',"logprobs":null,"finish_reason":"length"}]}',  # last one
        '{"id":"cmpl-7","choices":[{"index":0,"text":" d"}],"usage":{"prompt_tokens":2,"completion_tokens":9}}',
        '{"error":{"message":"engine died"}}',
    ]
    data = b"".join(b"data: " + e.encode() + b"\n\n" for e in events)
    st = _parse_in_pieces(data, []).state
    assert st.token_events == 5  # a, b, say "hi", c, d
    assert st.completion_tokens == 9 and st.prompt_tokens == 2
    assert st.error == "stream error: engine died"


def test_a_template_whose_other_fields_carry_text_is_not_used() -> None:
    """A chat chunk with content and reasoning: an empty content still leaves a token, so
    the bytes around the content do not tell a token apart; every chunk is decoded."""
    ev = [
        {"id": "c", "choices": [{"index": 0, "delta": {"content": "x", "reasoning_content": "r"}}]},
        {"id": "c", "choices": [{"index": 0, "delta": {"content": "", "reasoning_content": "r"}}]},
    ]
    data = b"".join(b"data: " + json.dumps(e, separators=(",", ":")).encode() + b"\n\n" for e in ev)
    assert _parse_in_pieces(data, []).state.token_events == 2


def test_the_template_agrees_with_decoding_every_chunk(monkeypatch) -> None:
    """Random streams of varied chunks: the same state with or without the template."""
    import random

    import loadgen.sse as sse

    rng = random.Random(3)
    for _ in range(40):
        template = _chunks(rng)
        events = [template] * rng.randrange(1, 6) + [_chunks(rng) for _ in range(30)]
        rng.shuffle(events)
        data = b"".join(b"data: " + e + b"\n\n" for e in events) + b"data: [DONE]\n\n"
        cuts = sorted(rng.sample(range(1, len(data)), 5))
        fast = _parse_in_pieces(data, cuts).state
        monkeypatch.setattr(sse.SseParser, "_learn", lambda self, raw: None)
        slow = _parse_in_pieces(data, cuts).state
        monkeypatch.undo()
        assert fast == slow


def test_kept_text_reads_every_token() -> None:
    data = _vllm_like(5, chat=True, texts=["a", "b", "c"])
    st = _parse_in_pieces(data, [7, 50, 51]).state
    kept = _parse_in_pieces(data, [7, 50, 51], keep=True).state
    assert "".join(kept.text) == "abcab" and kept.token_events == st.token_events == 5


def test_an_error_mid_stream_is_kept_and_tokens_before_it_count() -> None:
    data = _vllm_like(3, usage=False).replace(b"data: [DONE]\n\n", b"")
    data += b'data: {"error":{"message":"out of memory","code":500}}\n\n'
    st = _parse_in_pieces(data, [len(data) - 10]).state
    assert st.token_events == 3 and st.error == "stream error: out of memory" and not st.done


def test_crlf_streams_split_across_reads() -> None:
    data = _vllm_like(4).replace(b"\n", b"\r\n")
    for cut in range(1, len(data)):
        st = _parse_in_pieces(data, [cut]).state
        assert (st.token_events, st.completion_tokens, st.done) == (4, 4, True), cut


@pytest.mark.parametrize("chat", [False, True])
def test_a_long_stream_decodes_only_a_few_chunks(monkeypatch, chat: bool) -> None:
    """The parser's cost is per token: the template spares decoding the JSON of each."""
    import loadgen.sse as sse

    calls = []
    real = sse._decode_json
    monkeypatch.setattr(sse, "_decode_json", lambda b: calls.append(1) or real(b))
    st = _parse_in_pieces(_vllm_like(64, chat=chat), []).state
    assert st.token_events == 64 and st.completion_tokens == 64
    assert 0 < len(calls) <= 6, len(calls)


def test_reads_of_one_whole_event_agree_with_decoding_them(monkeypatch) -> None:
    """Reads as a paced engine gives them: mostly one whole event each, now and then an event
    split mid-way or several together. Each token counts at the read that completes it, the
    same with the read-a-whole-event shortcut as with every event decoded."""
    import random

    import loadgen.sse as sse

    rng = random.Random(5)
    texts = [" a", "", '"', "\\", "é", "x\ny", " data: ", "\u2028", "  "]
    for chat in (False, True):
        picked = [rng.choice(texts) for _ in range(60)]
        data = _vllm_like(60, chat=chat, texts=picked)
        ends = [i + 2 for i in range(len(data)) if data[i : i + 2] == b"\n\n"]
        cuts, prev = [], 0
        for end in ends:
            r = rng.random()
            if r < 0.15:  # split mid-event
                cuts.append(rng.randrange(prev + 1, end))
            if r > 0.3 or end == ends[-1]:  # else: this event shares the next one's read
                cuts.append(end)
            prev = end
        cuts = sorted(set(cuts))[:-1]
        fast = _parse_in_pieces(data, cuts).state
        assert fast.completion_tokens == 60 and fast.done and fast.error is None
        assert fast.token_events == sum(1 for t in picked if t)
        monkeypatch.setattr(sse.SseParser, "_learn", lambda self, raw: None)
        slow = _parse_in_pieces(data, cuts).state
        monkeypatch.undo()
        assert fast == slow
        assert len(fast.gaps) == fast.token_events - 1


def test_a_read_of_one_event_is_timed_at_that_read() -> None:
    data = _vllm_like(5)
    events = [e + b"\n\n" for e in data.split(b"\n\n")[:-1]]
    p = SseParser()
    for k, ev in enumerate(events):
        p.feed(ev, now=10.0 + k * k)
    p.finish(now=1e6)
    st = p.state
    assert st.token_events == 5 and st.first_token_at == 10.0 and st.last_token_at == 26.0
    assert st.gaps == [1.0, 3.0, 5.0, 7.0]
    assert st.completion_tokens == 5 and st.done


def test_a_proven_template_spares_later_streams_their_probes(monkeypatch) -> None:
    """An engine's streams share a template but for their ids: once two probe decodes have
    proved it, a stream of that shape with another id learns it without them, and counts
    the same; another shape, or an id that is not a string of its own, is probed again."""
    import loadgen.sse as sse

    monkeypatch.setattr(sse, "_PROVEN", set())
    calls: list[int] = []
    real = sse._decode_json
    monkeypatch.setattr(sse, "_decode_json", lambda b: calls.append(1) or real(b))

    def decodes(data: bytes) -> int:
        before = len(calls)
        p = _parse_in_pieces(data, [])
        assert p.state.token_events == 8 and p.state.completion_tokens == 8
        assert p._pre is not None  # the template was learnt, so later tokens skip the JSON
        return len(calls) - before

    def stream(rid: str, model: str = "m") -> bytes:
        return (
            _vllm_like(8)
            .replace(b'"cmpl-7"', f'"{rid}"'.encode())
            .replace(b'"model":"m"', f'"model":"{model}"'.encode())
        )

    first = decodes(stream("cmpl-0a1b2c3d"))
    assert decodes(stream("cmpl-9f8e7d6c")) == first - 2
    assert decodes(stream("cmpl-55555555")) == first - 2
    assert decodes(stream("cmpl-9f8e7d6c", model="m2")) == first  # another shape: probed
    # The id also names the model: not one string of its own, so never left out.
    assert decodes(stream("cmpl-44444444", model="cmpl-44444444")) == first
    assert decodes(stream("cmpl-33333333", model="cmpl-33333333")) == first
