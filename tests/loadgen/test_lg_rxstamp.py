"""Kernel receive stamps: a token's time is when it reached the socket, not when it was read."""

from __future__ import annotations

import socket
import sys
import time
from collections.abc import Iterator

import pytest

from loadgen import rxstamp

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SO_TIMESTAMPNS")


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    client = socket.create_connection(srv.getsockname())
    server, _ = srv.accept()
    srv.close()
    yield client, server
    client.close()
    server.close()


def _stamped_read(client: socket.socket, server: socket.socket, payload: bytes, late_s: float):
    before = time.time()
    server.sendall(payload)
    sent = (before, time.time())  # loopback delivers inside the send call: between these
    time.sleep(late_s)  # the client is busy elsewhere
    data, kwall = rxstamp.recv(client, 65536)
    return sent, time.time(), data, kwall


@linux_only
def test_fresh_connections_are_stamped_from_their_first_read() -> None:
    # Linux switches its stamping on (and off, once the last stamped socket closes) in a
    # deferred kernel worker: without a socket held stamped, about one fresh connection in
    # five read its first bytes unstamped here. Each connection closes before the next
    # opens, as a worker's do between steps.
    assert rxstamp.keep_on(timeout_s=30)
    unstamped = 0
    for _ in range(50):
        with socket.socket() as srv:
            srv.bind(("127.0.0.1", 0))
            srv.listen()
            with socket.create_connection(srv.getsockname()) as client:
                server, _ = srv.accept()
                with server:
                    assert rxstamp.enable(client)
                    server.sendall(b"data: {}\n\n")
                    _, kwall = rxstamp.recv(client, 65536)
                    unstamped += kwall is None
    assert unstamped == 0


@linux_only
def test_a_late_read_still_gets_the_arrival_time(pair) -> None:
    client, server = pair
    assert rxstamp.keep_on(timeout_s=30)  # the kernel stamps from the first segment on
    assert rxstamp.enable(client)
    sent, read, data, kwall = _stamped_read(client, server, b"data: {}\n\n", 0.25)
    assert data == b"data: {}\n\n"
    assert kwall is not None
    # Loopback delivers inside the send call: the stamp sits within it, a quarter second
    # before the read. Bounded by clocks read on both sides of the send, a machine stall
    # (MACHINE.md: seconds at times) cannot put the stamp outside; stalls only make the read
    # later.
    assert sent[0] - 0.001 <= kwall <= sent[1] + 0.001
    assert read - kwall >= 0.2
    perf, from_kernel = rxstamp.to_perf(kwall)
    assert from_kernel and time.perf_counter() - perf >= 0.2


def test_without_a_stamp_the_callers_clock_is_used() -> None:
    before = time.perf_counter()
    perf, from_kernel = rxstamp.to_perf(None)
    assert not from_kernel and perf >= before
    # A stamp from a clock step (an hour away) is not trusted either.
    perf, from_kernel = rxstamp.to_perf(time.time() - 3600)
    assert not from_kernel and perf >= before


def test_tls_sockets_are_left_to_the_callers_clock() -> None:
    class FakeTls:
        def recvmsg(self, *a):  # pragma: no cover - must not be called
            raise AssertionError

        def cipher(self):
            return ("TLS_AES_128_GCM_SHA256", "TLSv1.3", 128)

        def setsockopt(self, *a):  # pragma: no cover
            raise AssertionError

    assert rxstamp.enable(FakeTls()) is False
