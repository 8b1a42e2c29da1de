"""The raw per-request record and the worker's status line: the wire between worker and sweep.

Workers append one JSON line per finished request (kind "r") and a status
line (kind "s") a few times a second; the sweep tails the file. Start times are
wall-clock (comparable across processes and, with NTP, hosts); every duration
is from ``time.perf_counter`` in the process that measured it.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from json.encoder import encode_basestring_ascii as _jstr

try:  # the gaps in C (loadgen/_hotread.c): the same text, a tenth of the time
    from loadgen._hotread import fixed6 as _fixed6
except ImportError:  # built without its C part
    _fixed6 = None

# A record's line, written by hand: json.dumps spent most of its time on the floats (each
# rounded, then printed in its shortest form: two dtoa conversions, one the dearest kind),
# and a worker writes one line a request with a float for every token. "%.6f" prints the
# same 6-decimal value with one cheap conversion, and reads back as the same float. Where
# the C part is built it prints the gaps (one a token, most of a line) by integer arithmetic.
_LINE = (
    '{"k":"r","w":%s,"step":%d,"t0":%.6f,"e2e":%s,"ttft":%s,"itl":[%s],"in":%s,"out":%s,'
    '"err":%s,"lag":%s,"id":%s,"kt":%s,"rin":%s,"rout":%s,"turn":%s,"tid":%s}'
)
_JSON_CONST = {None: "null", True: "true", False: "false"}


def _f6(x: float | None) -> str:
    return "null" if x is None else f"{x:.6f}"


def _int(x: int | None) -> str:
    return "null" if x is None else f"{x:d}"


def _str(x: str | None) -> str:
    return "null" if x is None else _jstr(x)


@dataclass(frozen=True, slots=True)
class RequestRecord:
    worker: str
    step: int
    start: float  # wall seconds at send
    e2e: float | None  # seconds from send to the last byte
    ttft: float | None  # seconds from send to the first token's bytes
    itl: tuple[float, ...]  # gaps between token events, seconds
    prompt_tokens: int | None
    output_tokens: int | None  # from usage when sent, else the count of token events
    error: str | None
    lag: float | None = None  # open loop: how late the request started, seconds
    response_id: str | None = None  # the server's id for the request, from the stream
    ttft_kernel: bool | None = None  # the first token's time came from the kernel's receive stamp
    requested_in: int | None = None  # prompt tokens asked for (None: not known)
    requested_out: int | None = None  # max_tokens sent
    turn: int | None = None  # conversations: the turn's index in its session, from 1
    trace_id: str | None = None  # the traceparent's trace id sent with it (engine spans on)

    @property
    def end(self) -> float | None:
        return None if self.e2e is None else self.start + self.e2e

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_line(self) -> str:
        itl = self.itl
        fast = math.isfinite(
            self.start + sum(itl) + (self.e2e or 0.0) + (self.ttft or 0.0) + (self.lag or 0.0)
        )
        if fast and type(self.ttft_kernel) in (bool, type(None)):
            gaps = None if _fixed6 is None else _fixed6(itl)
            if gaps is None:
                gaps = ("%.6f," * len(itl) % tuple(itl))[:-1]
            return _LINE % (
                _jstr(self.worker), self.step, self.start, _f6(self.e2e), _f6(self.ttft),
                gaps, _int(self.prompt_tokens),
                _int(self.output_tokens), _str(self.error), _f6(self.lag),
                _str(self.response_id), _JSON_CONST[self.ttft_kernel], _int(self.requested_in),
                _int(self.requested_out), _int(self.turn), _str(self.trace_id),
            )  # fmt: skip
        return self._json_line()

    def _json_line(self) -> str:
        """The line through json.dumps: for values the hand-written line cannot print (nan, inf)."""
        return json.dumps(
            {
                "k": "r",
                "w": self.worker,
                "step": self.step,
                "t0": round(self.start, 6),
                "e2e": None if self.e2e is None else round(self.e2e, 6),
                "ttft": None if self.ttft is None else round(self.ttft, 6),
                "itl": [round(g, 6) for g in self.itl],
                "in": self.prompt_tokens,
                "out": self.output_tokens,
                "err": self.error,
                "lag": None if self.lag is None else round(self.lag, 6),
                "id": self.response_id,
                "kt": self.ttft_kernel,
                "rin": self.requested_in,
                "rout": self.requested_out,
                "turn": self.turn,
                "tid": self.trace_id,
            },
            separators=(",", ":"),
        )


@dataclass(frozen=True, slots=True)
class WorkerStatus:
    worker: str
    pid: int
    time: float  # wall
    cpu_seconds: float  # the worker process's cumulative CPU
    in_flight: int
    oldest_start: float | None  # wall start of the oldest request still in flight
    step: int
    users: int
    sent: int  # requests started so far
    max_lag: float | None = None  # open loop: worst lateness since the last status

    def to_line(self) -> str:
        return json.dumps(
            {
                "k": "s",
                "w": self.worker,
                "pid": self.pid,
                "t": round(self.time, 6),
                "cpu": round(self.cpu_seconds, 4),
                "in": self.in_flight,
                "oldest": self.oldest_start,
                "step": self.step,
                "users": self.users,
                "sent": self.sent,
                "lag": self.max_lag,
            },
            separators=(",", ":"),
        )


def parse_line(line: str) -> RequestRecord | WorkerStatus | dict | None:
    """One line of the stream: a record, a status, another event (dict), or None if unreadable."""
    try:
        obj = json.loads(line)
    except ValueError:
        return None
    if not isinstance(obj, dict):
        return None
    kind = obj.get("k")
    if kind == "r":
        return RequestRecord(
            worker=str(obj.get("w", "")),
            step=int(obj.get("step", -1)),
            start=float(obj["t0"]),
            e2e=obj.get("e2e"),
            ttft=obj.get("ttft"),
            itl=tuple(obj.get("itl") or ()),
            prompt_tokens=obj.get("in"),
            output_tokens=obj.get("out"),
            error=obj.get("err"),
            lag=obj.get("lag"),
            response_id=obj.get("id"),
            ttft_kernel=obj.get("kt"),
            requested_in=obj.get("rin"),
            requested_out=obj.get("rout"),
            turn=obj.get("turn"),
            trace_id=obj.get("tid"),
        )
    if kind == "s":
        return WorkerStatus(
            worker=str(obj.get("w", "")),
            pid=int(obj.get("pid", 0)),
            time=float(obj["t"]),
            cpu_seconds=float(obj.get("cpu", 0.0)),
            in_flight=int(obj.get("in", 0)),
            oldest_start=obj.get("oldest"),
            step=int(obj.get("step", -1)),
            users=int(obj.get("users", 0)),
            sent=int(obj.get("sent", 0)),
            max_lag=obj.get("lag"),
        )
    return obj


class RecordTail:
    """Reads the lines appended to a file since the last call; a partial last line waits."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self._pos = 0
        self._partial = b""

    def skip_existing(self) -> None:
        """Start after whatever the file already holds."""
        try:
            self._pos = os.path.getsize(self.path)
        except OSError:
            self._pos = 0
        self._partial = b""

    def read_new(self) -> Iterator[RequestRecord | WorkerStatus | dict]:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self._pos)
                data = fh.read()
                self._pos = fh.tell()
        except FileNotFoundError:
            return
        if not data:
            return
        data = self._partial + data
        lines = data.split(b"\n")
        self._partial = lines.pop()
        for raw in lines:
            if raw.strip():
                item = parse_line(raw.decode("utf-8", errors="replace"))
                if item is not None:
                    yield item
