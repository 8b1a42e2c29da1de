"""The response head read without the HTTP parser (loadgen.stream_head): the heads engines
send take the short way, and every other head goes to geventhttpclient's parser."""

from __future__ import annotations

import pytest

from loadgen.stream_head import ChunkedResponse, chunked_keep_alive

# As the engines send them (uvicorn for vLLM and SGLang; cpp-httplib for llama.cpp).
UVICORN = (
    b"HTTP/1.1 200 OK\r\ndate: Sat, 05 Dec 2026 10:00:00 GMT\r\nserver: uvicorn\r\n"
    b"content-type: text/event-stream; charset=utf-8\r\ntransfer-encoding: chunked\r\n\r\n"
)
HTTPLIB = (
    b"HTTP/1.1 200 OK\r\nAccess-Control-Allow-Origin: \r\nContent-Type: text/event-stream\r\n"
    b"Keep-Alive: timeout=5, max=100\r\nServer: llama.cpp\r\nTransfer-Encoding: chunked\r\n\r\n"
)


def test_engines_streaming_heads_take_the_short_way() -> None:
    assert chunked_keep_alive(UVICORN) == 200
    assert chunked_keep_alive(HTTPLIB) == 200
    assert chunked_keep_alive(b"HTTP/1.1 200\r\nTransfer-Encoding:chunked\r\n\r\n") == 200
    assert chunked_keep_alive(UVICORN.replace(b"200 OK", b"206 Partial Content")) == 206
    assert chunked_keep_alive(b"HTTP/1.1 200 OK\r\nConnection: keep-alive\r\n"
                              b"Transfer-Encoding: Chunked \r\n\r\n") == 200  # fmt: skip


@pytest.mark.parametrize("head", [
    UVICORN.replace(b"\r\n\r\n", b"\r\nconnection: close\r\n\r\n"),  # not to be reused
    UVICORN.replace(b"\r\n\r\n", b"\r\nConnection: Keep-Alive, Close\r\n\r\n"),
    UVICORN.replace(b"transfer-encoding: chunked", b"content-length: 12"),
    UVICORN.replace(b"\r\n\r\n", b"\r\ncontent-length: 12\r\n\r\n"),  # both: the parser judges
    UVICORN.replace(b"transfer-encoding: chunked", b"transfer-encoding: gzip, chunked"),
    UVICORN.replace(b"\r\n\r\n", b"\r\ntransfer-encoding: chunked\r\n\r\n"),  # twice
    UVICORN.replace(b"HTTP/1.1", b"HTTP/1.0"),  # not kept alive by default
    UVICORN.replace(b"200 OK", b"400 Bad Request"),  # its body is the error to report
    UVICORN.replace(b"200 OK", b"500 Internal Server Error"),
    UVICORN.replace(b"200 OK", b"204 No Content"),  # no body at all
    UVICORN.replace(b"200 OK", b"2000 OK"),
    UVICORN.replace(b"200 OK", b"2x0 OK"),
    UVICORN.replace(b"server: uvicorn", b"server: uvicorn\r\n folded"),  # obsolete folding
    UVICORN.replace(b"server: uvicorn", b"no colon here"),
    UVICORN.replace(b"transfer-encoding: chunked", b"transfer-encoding : chunked"),
    UVICORN[:-2],  # the head not whole
])  # fmt: skip
def test_any_other_head_goes_to_the_http_parser(head: bytes) -> None:
    assert chunked_keep_alive(head) is None


class Pool:
    def __init__(self) -> None:
        self.returned: list[object] = []
        self.released: list[object] = []

    def return_socket(self, sock: object) -> None:
        self.returned.append(sock)

    def release_socket(self, sock: object) -> None:
        self.released.append(sock)


def test_a_whole_body_gives_its_connection_back_and_a_cut_one_closes_it() -> None:
    pool, whole, cut = Pool(), object(), object()
    done = ChunkedResponse(200, whole, pool)
    done.message_complete = True
    done.release()
    done.release()  # once only
    ChunkedResponse(200, cut, pool).release()
    assert pool.returned == [whole] and pool.released == [cut]


def test_a_response_dropped_unreleased_does_not_keep_its_connection() -> None:
    pool, sock = Pool(), object()
    ChunkedResponse(200, sock, pool)  # dropped at once (CPython frees it here)
    assert pool.released == [sock] and pool.returned == []
