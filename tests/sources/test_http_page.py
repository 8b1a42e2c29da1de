"""The plain-http client under the Scraper, against scripted servers on 127.0.0.1."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from raw_http import Answer, RawServer, ok

from monitor.core.errors import EndpointAnsweredError, EndpointError
from monitor.sources.http_page import BadResponse, PageClient, build_request
from monitor.sources.promtext import Scraper


@pytest.fixture
def raw() -> Iterator[RawServer]:
    with RawServer() as server:
        yield server


def scrape(raw: RawServer, n: int, timeout: float = 2.0) -> tuple[list[str], int]:
    """n pages through one Scraper, and the connections the server accepted for them."""
    with Scraper(raw.url, timeout) as scraper:
        pages = [scraper.get() for _ in range(n)]
    return pages, raw.accepts


def chunked(*chunks: bytes, head: str = "", trailer: bytes = b"") -> bytes:
    out = b"HTTP/1.1 200 OK\r\n" + head.encode() + b"Transfer-Encoding: chunked\r\n\r\n"
    for chunk in chunks:
        out += f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n"
    return out + b"0\r\n" + trailer + b"\r\n"


def test_one_connection_carries_every_get_with_the_request_headers(raw: RawServer) -> None:
    raw.answer(ok(b"m 1\n"), ok(b"m 2\n"), ok(b"m 3\n"))
    assert scrape(raw, 3) == (["m 1\n", "m 2\n", "m 3\n"], 1)
    request = raw.requests[0].decode()
    assert request.startswith("GET /metrics HTTP/1.1\r\n")
    lines = request.split("\r\n")
    assert f"Host: 127.0.0.1:{raw.port}" in lines
    assert "Accept-Encoding: identity" in lines
    assert "Accept: text/plain;version=0.0.4;q=1,*/*;q=0.1" in lines


def test_the_host_header_names_the_port_unless_it_is_80() -> None:
    assert b"\r\nHost: h\r\n" in build_request("h", 80, "/metrics", {})
    assert b"\r\nHost: h:8000\r\n" in build_request("h", 8000, "/metrics", {})
    assert b"\r\nHost: [::1]:8000\r\n" in build_request("::1", 8000, "/m", {})
    assert b"\r\nHost: xn--bcher-kva.example\r\n" in build_request(
        "b\u00fccher.example", 80, "/", {}
    )
    # A space or a control character in the path cannot break the request line.
    assert build_request("h", 80, "/a b\r\nX: y", {}).startswith(b"GET /a%20b%0D%0AX:%20y HTTP")


def test_a_chunked_page_with_extensions_and_trailers(raw: RawServer) -> None:
    body = chunked(b"m 1\n", b'm_2{a="b"} 2\n', trailer=b"X-Checksum: 1\r\nX-More: 2\r\n")
    body = body.replace(b"4\r\n", b"4;name=value;x\r\n", 1)  # a chunk extension
    raw.answer(Answer([body]), ok(b"next\n"))
    # The trailers were read to their end: the next answer starts clean, same connection.
    assert scrape(raw, 2) == (['m 1\nm_2{a="b"} 2\n', "next\n"], 1)


def test_header_names_in_any_case(raw: RawServer) -> None:
    page = b"m 1\n"
    raw.answer(
        Answer([b"HTTP/1.1 200 OK\r\ncontent-LENGTH: 4\r\nCONTENT-type: text/plain\r\n\r\n" + page]),
        Answer([chunked(page).replace(b"Transfer-Encoding: chunked", b"TRANSFER-encoding: Chunked")]),
    )  # fmt: skip
    assert scrape(raw, 2) == (["m 1\n", "m 1\n"], 1)


@pytest.mark.parametrize("version", ["HTTP/1.1", "HTTP/1.0"])
def test_a_body_without_length_runs_to_the_end_of_the_connection(
    raw: RawServer, version: str
) -> None:
    page = b"m 1\n" * 2000
    head = f"{version} 200 OK\r\nContent-Type: text/plain\r\n\r\n".encode()
    raw.answer(Answer([head, page[:3000], page[3000:]], gap=0.02, close=True), ok(b"again\n"))
    assert scrape(raw, 2) == ([page.decode(), "again\n"], 2)


def test_connection_close_with_a_length_is_not_reused(raw: RawServer) -> None:
    # The server says close but keeps the socket open: a client that reused it would get
    # its next answer on the same connection, and one accept.
    raw.answer(ok(b"m 1\n", "Connection: close"), ok(b"m 2\n"))
    assert scrape(raw, 2) == (["m 1\n", "m 2\n"], 2)


def test_an_http_1_0_answer_is_kept_alive_only_when_it_says_so(raw: RawServer) -> None:
    answer = b"HTTP/1.0 200 OK\r\nContent-Length: 4\r\n%s\r\nm 1\n"
    raw.answer(
        Answer([answer % b"Connection: keep-alive\r\n"]),
        Answer([answer % b""]),
        Answer([answer % b""]),
    )
    assert scrape(raw, 3) == (["m 1\n"] * 3, 2)


def test_interim_answers_before_the_page_are_skipped(raw: RawServer) -> None:
    raw.answer(
        Answer([
            b"HTTP/1.1 100 Continue\r\n\r\n",
            b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"
            b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nm 1\n",
        ], gap=0.02),
        ok(b"m 2\n"),
    )  # fmt: skip
    assert scrape(raw, 2) == (["m 1\n", "m 2\n"], 1)


def test_an_answer_sent_a_byte_at_a_time(raw: RawServer) -> None:
    whole = ok(b'm{a="1"} 1\nn 2\n', "Content-Type: text/plain; charset=utf-8").pieces[0]
    whole_chunked = chunked(b"m 1\n", b"n 2\n", trailer=b"T: 1\r\n")
    raw.answer(
        Answer([bytes([b]) for b in whole], gap=0.002),
        Answer([bytes([b]) for b in whole_chunked], gap=0.002),
        ok(b"after\n"),
    )
    # The deadline covers all ~700 pieces.
    assert scrape(raw, 3, timeout=30.0) == (['m{a="1"} 1\nn 2\n', "m 1\nn 2\n", "after\n"], 1)


def test_an_error_status_raises_and_the_next_get_works(raw: RawServer) -> None:
    raw.answer(
        Answer([b"HTTP/1.1 404 Not Found\r\nContent-Length: 10\r\n\r\nnot found\n"]),
        ok(b"m 1\n"),
        Answer([b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\n\r\n"], close=True),
        ok(b"m 2\n"),
    )
    with Scraper(raw.url, 2.0) as scraper:
        with pytest.raises(EndpointAnsweredError, match=r"/metrics answered HTTP 404 Not Found$"):
            scraper.get()
        assert scraper.get() == "m 1\n"
        with pytest.raises(EndpointAnsweredError, match="answered HTTP 503 Service Unavailable"):
            scraper.get()
        assert scraper.get() == "m 2\n"


def test_a_trickling_server_is_cut_off_at_the_deadline(raw: RawServer) -> None:
    whole = ok(b"m 1\n" * 50).pieces[0]
    trickle = Answer([bytes([b]) for b in whole], gap=0.05)  # ~10 s for the whole answer
    raw.answer(trickle)
    with Scraper(raw.url, 0.3) as scraper:
        started = time.monotonic()
        with pytest.raises(EndpointError, match=r"did not answer within 0\.3 s"):
            scraper.get()
        took = time.monotonic() - started
    # 0.3 s and scheduling; far under the ~10 s a per-recv timeout would let it run.
    assert took < 2.0


def test_a_page_over_the_size_limit_is_refused(raw: RawServer) -> None:
    raw.answer(Answer([b"HTTP/1.1 200 OK\r\nContent-Length: 67108865\r\n\r\nm 1\n"]), ok(b"m 1\n"))
    with Scraper(raw.url, 2.0) as scraper:
        with pytest.raises(EndpointError, match=r"cannot read .*over the 64 MiB limit"):
            scraper.get()
        assert scraper.get() == "m 1\n"  # a fresh connection
    assert raw.accepts == 2


@pytest.mark.parametrize(
    "answer",
    [
        chunked(b"x" * 600, b"y" * 600),
        b"HTTP/1.1 200 OK\r\n\r\n" + b"z" * 1500,
    ],
    ids=["chunked", "to-eof"],
)
def test_a_body_without_a_declared_size_is_bounded_too(raw: RawServer, answer: bytes) -> None:
    raw.answer(Answer([answer], close=True))
    client = PageClient("127.0.0.1", raw.port, build_request("127.0.0.1", raw.port, "/", {}), 1000)
    deadline = time.monotonic() + 2.0
    client.connect(deadline)
    with pytest.raises(BadResponse, match="over the 1000 bytes limit"):
        client.get(deadline)
    assert not client.connected


def test_a_fresh_connection_closed_mid_answer_is_an_error_not_a_retry(raw: RawServer) -> None:
    raw.answer(
        Answer([b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nm 1\n"], close=True), ok(b"m 1\n")
    )
    with Scraper(raw.url, 2.0) as scraper:
        with pytest.raises(EndpointError, match="closed the connection: after 4 of 100 bytes"):
            scraper.get()
    assert raw.accepts == 1


def test_a_kept_alive_connection_the_server_closed_is_retried_once(raw: RawServer) -> None:
    raw.answer(Answer(ok(b"m 1\n").pieces, close=True), ok(b"m 2\n"))
    with Scraper(raw.url, 2.0) as scraper:
        assert scraper.get() == "m 1\n"
        time.sleep(0.05)  # let the server's close arrive before the next request
        assert scraper.get() == "m 2\n"
    assert raw.accepts == 2


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (b"SSH-2.0-OpenSSH_9.6\r\n\r\n", "not an HTTP/1.x status line"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: ten\r\n\r\n", "malformed Content-Length"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 4, 5\r\n\r\nm 1\n", "malformed Content-Length"),
        (chunked(b"m 1\n").replace(b"4\r\n", b"zz\r\n"), "malformed chunk size"),
    ],
)
def test_an_answer_that_is_not_http_is_one_line(
    raw: RawServer, answer: bytes, message: str
) -> None:
    raw.answer(Answer([answer]))
    with Scraper(f"http://u:s3cret@127.0.0.1:{raw.port}/metrics", 2.0) as scraper:
        with pytest.raises(EndpointError) as err:
            scraper.get()
    text = str(err.value)
    assert text.startswith(f"cannot read http://127.0.0.1:{raw.port}/metrics: {message}")
    assert "\n" not in text and "s3cret" not in text


def _splits(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in zip(points, points[1:]) if b > a]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    body=st.binary(max_size=5000),
    framing=st.sampled_from(["length", "chunked", "eof"]),
    chunk_sizes=st.lists(st.integers(1, 700), min_size=1, max_size=12),
    extensions=st.booleans(),
    cuts=st.lists(st.integers(0, 10**6), max_size=8),
)
def test_any_body_through_any_framing_and_splits_comes_back_exactly(
    body: bytes,
    framing: str,
    chunk_sizes: list[int],
    extensions: bool,
    cuts: list[int],
) -> None:
    if framing == "length":
        answer = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body
    elif framing == "eof":
        answer = b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + body
    else:
        answer = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        at, i = 0, 0
        while at < len(body):
            piece = body[at : at + chunk_sizes[i % len(chunk_sizes)]]
            ext = b";n=v" if extensions else b""
            answer += b"%x%s\r\n%s\r\n" % (len(piece), ext, piece)
            at, i = at + len(piece), i + 1
        answer += b"0\r\nT: 1\r\n\r\n" if extensions else b"0\r\n\r\n"
    with RawServer() as server:
        server.answer(Answer(_splits(answer, cuts), gap=0.001, close=framing == "eof"), ok(b"x"))
        request = build_request("127.0.0.1", server.port, "/", {})
        client = PageClient("127.0.0.1", server.port, request)
        client.connect(time.monotonic() + 5.0)
        got = client.get(time.monotonic() + 5.0)
        assert (got.status, got.body) == (200, body)
        assert client.connected == (framing != "eof")
        if not client.connected:
            client.connect(time.monotonic() + 5.0)
        assert client.get(time.monotonic() + 5.0).body == b"x"  # the buffer starts clean
        client.close()
