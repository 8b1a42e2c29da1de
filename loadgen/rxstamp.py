"""Kernel receive timestamps (SO_TIMESTAMPNS) for the bytes of a response stream.

An engine emits one token for every running stream at the end of each step, so
hundreds of streams' bytes land together and one client thread works through
them in turn: stamped when the client gets round to a socket, a first token
looks late by however long the client spent on the sockets before it. The
kernel stamps each segment as it reaches the socket, so a time taken from the
kernel is the token's arrival, whatever the client was doing. TCP hands back
the stamp of the newest segment a read consumed, which is the token's own as
long as the client keeps up (one event per read).

Gevent-free: any socket object with ``recvmsg`` (gevent's cooperative one in
the worker, the standard one in tests). TLS sockets and platforms without the
option read plainly and the caller stamps with its own clock.

Linux stamps incoming packets only while some socket on the host wants stamps, and
it does not switch on the moment the first one asks: ``setsockopt`` leaves the switch
to a kernel worker (``net_enable_timestamp``'s deferred work), which runs when a core
gets to it, and switching off when the last such socket closes goes the same way. A
process whose connections were the only stamped sockets would read its first tokens
unstamped on every connection opened after the earlier ones closed (measured here:
45 of 200 fresh loopback connections got no stamp on any of their first three reads),
and for longer while the host stalls. ``keep_on`` holds one stamped socket for the
process's life and waits until a read carries a stamp.
"""

from __future__ import annotations

import socket
import struct
import sys
import time
from typing import Any

# Linux's value where Python does not export the name (it does from 3.13 on some builds).
SO_TIMESTAMPNS: int | None = getattr(
    socket, "SO_TIMESTAMPNS", 35 if sys.platform.startswith("linux") else None
)
TIMESPEC = struct.Struct("@qq")
_CMSG_SPACE = socket.CMSG_SPACE(TIMESPEC.size) if hasattr(socket, "CMSG_SPACE") else 0
# A stamp further from the wall clock than this is not trusted (a clock step, a bogus value).
MAX_AGE_S = 60.0


def cmsg_space() -> int:
    """Ancillary buffer size for one stamp (0: the platform cannot hand stamps back)."""
    return _CMSG_SPACE


def enable(sock: Any) -> bool:
    """Ask the kernel to stamp what arrives on ``sock``; False where it cannot be read back."""
    if SO_TIMESTAMPNS is None or not _CMSG_SPACE or not hasattr(sock, "recvmsg"):
        return False
    if hasattr(sock, "cipher"):  # TLS: the stamps would be the records', unreadable through SSL
        return False
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    except (OSError, ValueError, AttributeError):
        return False
    return True


# A stamped loopback connection held for the process's life (the stamped end, its peer):
# it keeps the kernel stamping while connections to the target come and go.
_KEEPER: list[tuple[socket.socket, socket.socket]] = []


def keep_on(timeout_s: float = 5.0) -> bool:
    """Keep the kernel stamping for this process's life; True once a read carries a stamp,
    False where none came within ``timeout_s`` (the platform cannot, or the kernel's
    worker has not run yet: reads before it fall back to the caller's clock as ever).

    Probes the held connection one byte at a time until the switch shows in a read."""
    if SO_TIMESTAMPNS is None or not _CMSG_SPACE:
        return False
    deadline = time.monotonic() + timeout_s
    try:
        if not _KEEPER:
            with socket.socket() as listener:
                listener.bind(("127.0.0.1", 0))
                listener.listen(1)
                stamped = socket.create_connection(listener.getsockname(), timeout=timeout_s)
                peer, _ = listener.accept()
            if not enable(stamped):
                stamped.close()
                peer.close()
                return False
            _KEEPER.append((stamped, peer))
        stamped, peer = _KEEPER[0]
        while True:
            peer.sendall(b".")
            _, stamp = recv(stamped, 64)
            if stamp is not None:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.005)
    except OSError:  # no loopback to probe on: reads fall back to the caller's clock
        return False


def recv(sock: Any, nbytes: int) -> tuple[bytes, float | None]:
    """Read up to ``nbytes``; return them with the kernel's wall-clock arrival, or None.

    None when the kernel attached no stamp: segments that arrive before the kernel
    starts stamping (``keep_on``) carry none.
    """
    data, ancillary, _flags, _addr = sock.recvmsg(nbytes, _CMSG_SPACE)
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(payload) >= 16:
            sec, nsec = TIMESPEC.unpack_from(payload)
            return data, sec + nsec * 1e-9
    return data, None


def to_perf(kernel_wall: float | None) -> tuple[float, bool]:
    """The ``time.perf_counter`` reading for a kernel stamp: (time, True), else (now, False)."""
    now_perf = time.perf_counter()
    if kernel_wall is None:
        return now_perf, False
    age = time.time() - kernel_wall
    # Float rounding of a 1.7e9 s wall time is ~0.2 us: a hair below zero is "just now".
    if not -1e-3 <= age <= MAX_AGE_S:
        return now_perf, False
    return now_perf - max(0.0, age), True
