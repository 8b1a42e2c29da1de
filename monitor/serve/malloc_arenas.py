"""Fewer glibc malloc arenas for the long-running agent.

glibc gives each thread that allocates an arena of its own, up to eight per core, and an
arena keeps most of what is freed in it. The agent answers each request in a thread of
its own, and a request makes the readings gathered since the last one (Sampler.flush):
page texts, samples, snapshots, allocated in whichever arena that thread drew. Over hours
its RSS crept while what Python held stayed flat (bench/agent_fault_soak.py: tracemalloc
7.2 -> 7.6 -> 7.3 MiB over 30 minutes while RSS rose; the same soak side by side, RSS
slope +2.3 MiB/h without a cap and flat with MALLOC_ARENA_MAX=2). Two arenas are what
MALLOC_ARENA_MAX=2, the usual setting for threaded Python servers, gives; a value the
operator set in the environment is left alone.
"""

from __future__ import annotations

import ctypes
import logging
import os
import platform

log = logging.getLogger(__name__)

_M_ARENA_MAX = -8  # malloc.h


def limit_malloc_arenas(arenas: int = 2) -> bool:
    """Cap glibc's malloc arenas at ``arenas`` (before the threads start); True if done."""
    if "MALLOC_ARENA_MAX" in os.environ or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL(None)
        done = bool(libc.mallopt(ctypes.c_int(_M_ARENA_MAX), ctypes.c_int(arenas)))
    except (OSError, AttributeError):
        return False
    if not done:
        log.debug("mallopt(M_ARENA_MAX, %d) refused", arenas)
    return done
