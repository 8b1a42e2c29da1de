"""The engine's own caps (max_num_seqs, max_num_batched_tokens), asked of the engine itself.

vLLM exports neither cap as a metric. Two ways to ask a real server, tried in
this order:
- ``GET /server_info?config_format=json``: vLLM's dev endpoint (served when the
  server runs with ``VLLM_SERVER_DEV_MODE=1``; 404 otherwise) returns the whole
  ``vllm_config`` with ``scheduler_config.max_num_seqs``. The simulator serves
  the same document.
- ``GET /props``: llama.cpp's server reports its slots (``total_slots``, its
  ``--parallel``: the sequence cap) whether or not the flag was given.
- the command line of the process listening on the URL's port, when it is on
  this host and ours to read (``--max-num-seqs N``; llama.cpp's ``--parallel N`` or
  ``-np N``; SGLang's ``--max-running-requests N``).
A cap asked this way is exact; one inferred from a plateau is a guess, and a
default is a worse one (vLLM's default depends on its version and the GPU).
"""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import psutil

log = logging.getLogger(__name__)

LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1", "0.0.0.0"}
_FLAGS = {
    "--max-num-seqs": "max_num_seqs",
    "--max_num_seqs": "max_num_seqs",
    "--max-num-batched-tokens": "max_num_batched_tokens",
    "--max_num_batched_tokens": "max_num_batched_tokens",
    # llama.cpp's slots and SGLang's running limit are their engines' sequence caps.
    "--parallel": "max_num_seqs",
    "-np": "max_num_seqs",
    "--max-running-requests": "max_num_seqs",
}


@dataclass(frozen=True, slots=True)
class ReportedCaps:
    max_num_seqs: int | None
    max_num_batched_tokens: int | None
    origin: str  # "server_info", "props" or "cmdline"


def _positive_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    try:
        n = int(value)
    except (TypeError, ValueError):
        return None
    return n if n > 0 else None


def caps_from_server_info(doc: Mapping[str, Any]) -> ReportedCaps | None:
    """The caps in vLLM's ``/server_info?config_format=json`` document, if it has them."""
    config = doc.get("vllm_config")
    if not isinstance(config, Mapping):
        return None
    sched = config.get("scheduler_config")
    if not isinstance(sched, Mapping):
        return None
    seqs = _positive_int(sched.get("max_num_seqs"))
    tokens = _positive_int(sched.get("max_num_batched_tokens"))
    if seqs is None and tokens is None:
        return None
    return ReportedCaps(seqs, tokens, "server_info")


def caps_from_props(doc: Mapping[str, Any]) -> ReportedCaps | None:
    """The slot count in llama.cpp's ``/props`` document, if it has one."""
    slots = _positive_int(doc.get("total_slots"))
    return ReportedCaps(slots, None, "props") if slots is not None else None


def caps_from_cmdline(argv: Sequence[str]) -> ReportedCaps | None:
    """The caps given on a vLLM command line (``--max-num-seqs 4`` or ``--max-num-seqs=4``)."""
    found: dict[str, int | None] = {}
    for i, arg in enumerate(argv):
        flag, eq, value = arg.partition("=")
        field = _FLAGS.get(flag)
        if field is None:
            continue
        if not eq:
            value = argv[i + 1] if i + 1 < len(argv) else ""
        found[field] = _positive_int(value)
    if not any(v is not None for v in found.values()):
        return None
    return ReportedCaps(found.get("max_num_seqs"), found.get("max_num_batched_tokens"), "cmdline")


def _listener_cmdlines(port: int) -> list[list[str]]:
    try:
        conns = psutil.net_connections(kind="tcp")
    except (psutil.AccessDenied, OSError):
        return []
    out = []
    for c in conns:
        if c.status != psutil.CONN_LISTEN or not c.laddr or c.laddr.port != port or c.pid is None:
            continue
        try:
            out.append(psutil.Process(c.pid).cmdline())
        except (psutil.Error, OSError):
            continue
    return out


class EngineConfigProbe:
    """Asks one engine for its caps now and then; ``caps()`` never blocks longer than one GET.

    A server that answers is asked again every ``every`` seconds (a restart may
    change its caps); one that does not is asked again only every ``retry``.
    """

    def __init__(
        self,
        base_url: str,
        timeout: float = 1.0,
        every: float = 30.0,
        retry: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
        cmdlines: Callable[[int], list[list[str]]] = _listener_cmdlines,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.every = every
        self.retry = retry
        self._clock = clock
        self._cmdlines = cmdlines
        self._next = 0.0
        self._caps: ReportedCaps | None = None

    def forget(self) -> None:
        """Ask again on the next read (the engine was restarted with other settings)."""
        self._next = 0.0
        self._caps = None

    def caps(self) -> ReportedCaps | None:
        now = self._clock()
        if now < self._next:
            return self._caps
        self._caps = self._ask()
        self._next = now + (self.every if self._caps is not None else self.retry)
        return self._caps

    def _ask(self) -> ReportedCaps | None:
        caps = self._server_info()
        if caps is None:
            caps = self._props()
        if caps is None:
            caps = self._cmdline()
        return caps

    def _server_info(self) -> ReportedCaps | None:
        doc = self._get_json("/server_info?config_format=json")
        return caps_from_server_info(doc) if doc is not None else None

    def _props(self) -> ReportedCaps | None:
        doc = self._get_json("/props")
        return caps_from_props(doc) if doc is not None else None

    def _get_json(self, path: str) -> Mapping[str, Any] | None:
        try:
            with urllib.request.urlopen(self.base_url + path, timeout=self.timeout) as resp:
                doc = json.loads(resp.read(4 << 20))
        except (urllib.error.URLError, OSError, ValueError):
            return None  # 404 (vLLM without dev mode, not llama.cpp): the next way is tried
        return doc if isinstance(doc, Mapping) else None

    def _cmdline(self) -> ReportedCaps | None:
        parts = urlsplit(self.base_url)
        if parts.hostname not in LOCAL_HOSTS or parts.port is None:
            return None
        for argv in self._cmdlines(parts.port):
            caps = caps_from_cmdline(argv)
            if caps is not None:
                return caps
        return None
