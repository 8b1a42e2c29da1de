"""The agent caps glibc's malloc arenas, so threads that allocate at once share two.

Each case runs in a fresh interpreter (arenas are per process and cannot be given back):
sixteen threads allocate at the same moment, then glibc's malloc_info counts the heaps.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(
    platform.libc_ver()[0] != "glibc", reason="malloc arenas are glibc's"
)

_COUNT_ARENAS = textwrap.dedent(
    """
    import ctypes, os, sys, tempfile, threading
    from monitor.serve.malloc_arenas import limit_malloc_arenas

    limited = limit_malloc_arenas() if sys.argv[1] == "limit" else False
    start = threading.Barrier(16)
    kept = []

    def allocate():
        start.wait()
        for _ in range(2000):
            kept.append(bytearray(600))  # past pymalloc's small objects: glibc's malloc

    threads = [threading.Thread(target=allocate) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    libc = ctypes.CDLL(None)
    libc.fopen.restype = ctypes.c_void_p
    path = os.path.join(tempfile.mkdtemp(), "malloc.xml")
    fp = libc.fopen(path.encode(), b"w")
    libc.malloc_info(0, ctypes.c_void_p(fp))
    libc.fclose(ctypes.c_void_p(fp))
    print(limited, open(path).read().count("<heap nr="))
    """
)


def _arenas(mode: str, env: dict[str, str]) -> tuple[str, int]:
    out = subprocess.run(
        [sys.executable, "-c", _COUNT_ARENAS, mode],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=True,
    ).stdout.split()
    return out[0], int(out[1])


def test_threads_allocating_at_once_share_two_arenas() -> None:
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    limited, arenas = _arenas("limit", env)
    assert limited == "True" and arenas <= 2
    # The same threads without the cap spread over more (glibc: up to 8 per core).
    _, spread = _arenas("free", env)
    assert spread > 2


def test_an_operators_setting_is_left_alone() -> None:
    env = {**os.environ, "MALLOC_ARENA_MAX": "4"}
    limited, arenas = _arenas("limit", env)
    assert limited == "False" and arenas <= 4
