"""The Locust process: streaming OpenAI users, the step shape, and the raw record stream.

Run by the sweep as ``python -m loadgen.worker_locust --role local|master|worker``;
it is the only place (with loadgen/locust_*.py) that imports locust, whose
import patches the process for gevent. The sweep sends one JSON command per
line on stdin ({"cmd": "step", ...} or {"cmd": "stop"}); records and status
lines go to the ``--records`` file (the master writes its workers' lines too).

Remote workers (Locust's distributed mode) join a master started with
``headroom sweep --workers N --external-workers M --master-bind 0.0.0.0``:
    python -m loadgen.worker_locust --role worker --master-host HOST --master-port 5557 \
        --mode closed --config DIR/loadgen-config.json
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import socket
import sys
import time
import weakref
from dataclasses import replace
from itertools import count
from pathlib import Path
from typing import Any

import gevent
import gevent.pool
from gevent.fileobject import FileObjectPosix
from gevent.monkey import get_original
from geventhttpclient._parser import HTTPParseError
from geventhttpclient.connectionpool import ConnectionPool
from geventhttpclient.response import HTTPConnectionClosed, HTTPSocketPoolResponse
from geventhttpclient.url import URL
from locust import (  # importing locust patches the process for gevent
    FastHttpUser,
    LoadTestShape,
    constant,
    events,
    task,
)
from locust.env import Environment
from locust.log import setup_logging
from pydantic import ValidationError

from loadgen import rxstamp, worker_reader
from loadgen.chunked import ChunkedBody
from loadgen.prompts import Prompt, PromptSource, load_jsonl
from loadgen.records import RequestRecord, WorkerStatus
from loadgen.schema import WorkerConfig
from loadgen.sse import SseParser
from loadgen.stream_head import ChunkedResponse, chunked_keep_alive
from loadgen.trace import TraceEntry, load_trace

log = logging.getLogger("loadgen.worker")

FLUSH_S = 0.2
RECV_BYTES = 65536


_real_select = get_original("select", "select")


def _is_socket_alive(self: ConnectionPool, sock: Any) -> bool:
    """geventhttpclient's check of a pooled connection, without its switch to other greenlets.

    Its version polls through gevent's ``select``, which yields to every other ready
    greenlet even with a zero timeout: between the request's start stamp and its send,
    with hundreds of streams' tokens waiting to be read, that yield alone put ~1 ms on
    every TTFT. A zero-timeout poll never blocks, so the real ``select`` does.
    """
    if sock is None:
        return False
    try:
        if sock.fileno() < 0:
            return False
        # Readable while idle: the server closed it (FIN) or left bytes behind.
        readable, _, _ = _real_select([sock], [], [], 0.0)
        return not readable
    except (OSError, ValueError):
        return False


if hasattr(ConnectionPool, "_is_socket_alive"):
    ConnectionPool._is_socket_alive = _is_socket_alive  # type: ignore[method-assign]


class _State:
    """Per-process state the users and the control loop share (one gevent thread)."""

    def __init__(self) -> None:
        self.config: WorkerConfig | None = None
        self.prompts: PromptSource | None = None
        self.worker_id = f"{socket.gethostname()}-{os.getpid()}"
        self.step = -1
        self.mode = "closed"
        self.rate = 0.0  # this process's share of the open-loop rate, req/s
        self.speed: float | None = None  # trace replay: the step's speed
        self.trace: list[TraceEntry] = []
        self.in_flight: dict[int, float] = {}
        self.sent = 0
        self.max_lag: float | None = None
        # Lines to write, and records not yet printed (see _take_lines).
        self.lines: list[str | RequestRecord] = []
        self.headers: dict[str, str] = {}
        self.path = "/v1/completions"
        self.ids = count()
        # (config, body's head, body's tail): see _body.
        self.body_parts: tuple[WorkerConfig, bytes, bytes] | None = None


STATE = _State()


def _setup(cfg: WorkerConfig) -> None:
    STATE.config = cfg
    file_prompts: list[Prompt] = []
    if cfg.prompts_file:
        file_prompts = load_jsonl(cfg.prompts_file, cfg.api, cfg.output_tokens)
    STATE.prompts = PromptSource(
        cfg.api,
        cfg.input_tokens,
        cfg.output_tokens,
        cfg.length_dist,  # type: ignore[arg-type]
        cfg.length_spread,
        file_prompts,
        seed=None if cfg.seed is None else cfg.seed + os.getpid(),
        words=cfg.token_words,
        overhead=cfg.prompt_overhead,
        chat_overhead=cfg.chat_overhead,
        prefix_tokens=cfg.prefix_tokens,
        prefix_groups=cfg.prefix_groups,
    )
    if cfg.trace_file:
        STATE.trace = load_trace(cfg.trace_file, cfg.trace_time_unit_s)
    STATE.path = "/v1/chat/completions" if cfg.api == "chat" else "/v1/completions"
    headers = {
        "Content-Type": "application/json",
        "Accept": "text/event-stream",
        # Compression would make the server buffer tokens; we want each as it is sent.
        "Accept-Encoding": "identity",
    }
    key = os.environ.get("HEADROOM_API_KEY") or os.environ.get("OPENAI_API_KEY")
    if key:
        headers["Authorization"] = f"Bearer {key}"
    STATE.headers = headers
    for cls in (ClosedLoopUser, OpenLoopUser):
        cls.network_timeout = cfg.request_timeout_s
        cls.connection_timeout = min(30.0, cfg.request_timeout_s)


def _body(p: Prompt, cfg: WorkerConfig) -> bytes:
    """The request's JSON: the config's part encoded once a run, the prompt's each request.

    The same bytes as ``json.dumps`` of the whole dict in this key order, compact; only the
    prompt (or the messages) and max_tokens change between requests.
    """
    parts = STATE.body_parts
    if parts is None or parts[0] is not cfg:
        parts = STATE.body_parts = (cfg, *_body_parts(cfg))
    _cfg, head, tail = parts
    if p.messages is not None:
        payload = b',"messages":' + _dumps(list(p.messages)).encode()
    else:
        payload = b',"prompt":' + _dumps(p.prompt).encode()
    return b'%s%d,"stream":true%s%s' % (head, p.max_tokens, payload, tail)


_dumps = json.JSONEncoder(separators=(",", ":")).encode


def _body_parts(cfg: WorkerConfig) -> tuple[bytes, bytes]:
    """What comes before max_tokens' value, and what follows the prompt."""
    head = b'{"model":' + _dumps(cfg.model).encode() + b',"max_tokens":'
    tail = b""
    if cfg.include_usage:
        tail += b',"stream_options":{"include_usage":true}'
    if cfg.ignore_eos:
        tail += b',"ignore_eos":true'
    return head, tail + b"}"


class _Sender:
    """Writes a user's requests straight to its pooled connection, the head built once.

    geventhttpclient's request path (header merging and validation, URL parsing, the user
    agent's cookie jar and redirects) cost as much CPU per request as reading twenty of
    its tokens. Every request of a run has the same headers; only the body and its length
    change. The connection pool, its liveness check and the response parser stay its own.
    """

    __slots__ = ("_client", "_pool", "_head")

    def __init__(self, user: FastHttpUser) -> None:
        agent = user.client.client
        url = URL(user.host + STATE.path)
        self._client = agent.clientpool.get_client(url)
        self._pool = self._client._connection_pool
        headers = {**dict(agent.default_headers.items()), **STATE.headers, "Content-Length": "0"}
        head = self._client._build_request("POST", url.quoted_uri, body=b"", headers=headers)
        lines = [ln for ln in head.split("\r\n") if not ln.lower().startswith("content-length:")]
        # The head up to its blank line, less Content-Length: each request adds its own.
        self._head = "\r\n".join(ln for ln in lines if ln).encode("latin-1") + b"\r\n"

    def send(
        self, body: bytes, extra: bytes = b""
    ) -> tuple[HTTPSocketPoolResponse | ChunkedResponse, bytes | None, bool, float | None]:
        """Send one request (``extra``: header lines of its own); the response's headers read.

        Returns the response; the bytes read past its headers, which the HTTP parser has
        not seen (None: it has seen every byte, as for an interim 1xx response); whether
        the kernel stamps the connection's reads; and its wall-clock stamp of the last read
        (None: none), the arrival of those bytes: a first token read with the headers, as
        a busy client reads it, is timed by the kernel too.
        """
        request = self._head + extra + b"Content-Length: %d\r\n\r\n" % len(body) + body
        pool = self._pool
        for attempt in (0, 1):
            sock = pool.get_socket()
            try:
                kernel = _stamped(sock)
                _send(sock, request)
                head, rest, kwall = _read_head(sock, self._client.block_size, kernel)
            except (ConnectionResetError, BrokenPipeError, HTTPConnectionClosed):
                # A pooled connection the server closed before answering: llama.cpp's server
                # (cpp-httplib) ends each keep-alive connection after a few requests. Nothing
                # was answered, so this is no failure of the server: send once more, afresh.
                pool.release_socket(sock)
                if attempt:
                    raise
                continue
            except BaseException:
                pool.release_socket(sock)
                raise
            # The usual head of a body the hub reads (a plain socket): no parser (see
            # loadgen.stream_head). A TLS body is read here, by the parser, head and all.
            status = None if rest is None else chunked_keep_alive(head)
            if status is not None and worker_reader.plain_socket(sock) is not None:
                return ChunkedResponse(status, sock, pool), rest, kernel, kwall
            # Only the head goes through the HTTP parser here: the body is the caller's.
            resp = HTTPSocketPoolResponse(sock, pool, block_size=self._client.block_size,
                                          method="POST", headers_type=self._client.headers_type,
                                          pre_buffered=head)  # fmt: skip
            return resp, rest, kernel, kwall
        raise AssertionError("unreachable")


# The pooled connections whose reads the kernel stamps: the option stays set for the
# connection's life, so it costs one setsockopt a connection, not one a request.
_STAMPED: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()


def _stamped(sock: Any) -> bool:
    """Whether the kernel stamps ``sock``'s reads, asking it to on a new connection."""
    kernel = _STAMPED.get(sock)
    if kernel is None:
        kernel = _STAMPED[sock] = rxstamp.enable(sock)
    return kernel


def _send(sock: Any, request: bytes) -> None:
    """Send ``request``: straight to the plain socket (a request fits its send buffer), the
    rest, if any, through gevent's ``sendall`` (whose own first step asks the kernel for
    the buffer's size: a system call a request)."""
    inner = worker_reader.plain_socket(sock)
    sent = 0
    if inner is not None:
        try:
            sent = inner.send(request)
        except (BlockingIOError, InterruptedError):
            sent = 0
    if sent < len(request):
        sock.sendall(request[sent:] if sent else request)


def _read_head(sock: Any, block: int, kernel: bool) -> tuple[bytes, bytes | None, float | None]:
    """Read a response up to the end of its headers: (head, what was read past it, the
    kernel's wall-clock stamp of the last read or None).

    The rest is None when the head is left whole to the HTTP parser (an interim 1xx
    response, which a final one follows; bare-LF line ends).
    """
    buf, kwall = b"", None
    if worker_reader.plain_socket(sock) is not None:
        # The answer cannot be there yet, just sent: wait for it rather than try a read
        # first (a system call a request that fails). Waits under the socket's timeout.
        sock._wait(sock._read_event)
    while True:
        try:
            if kernel:
                data, kwall = rxstamp.recv(sock, block)
            else:
                data = sock.recv(block)
        except ConnectionResetError:
            if not buf:
                raise HTTPConnectionClosed("connection closed.") from None
            raise
        if not data:
            if not buf:
                raise HTTPConnectionClosed("connection closed.")
            raise HTTPParseError("connection closed before end of the headers")
        buf += data
        end = buf.find(b"\r\n\r\n")
        if end >= 0:
            if buf[9:10] == b"1":  # "HTTP/1.1 1xx": interim
                return buf, None, None
            return buf[: end + 4], buf[end + 4 :], kwall
        if buf.find(b"\n\n") >= 0 or len(buf) > 1 << 16:
            return buf, None, None  # let the parser judge it


def _chunked(resp: HTTPSocketPoolResponse | ChunkedResponse) -> bool:
    """The body is chunked (and only chunked) and still to come."""
    if type(resp) is ChunkedResponse:
        return True
    te = resp.get("transfer-encoding")
    return (
        isinstance(te, str)
        and te.strip().lower() == "chunked"
        and resp.get("content-length") is None
        and not resp.message_complete
    )


def _response_error(raw: HTTPSocketPoolResponse) -> str:
    try:
        content = raw.read()
    except Exception:
        content = b""
    excerpt = content[:200].decode("utf-8", errors="replace").replace("\n", " ")
    return f"HTTP {raw.status_code}: {excerpt}"


def stream_one(
    user: FastHttpUser,
    intended: float | None = None,
    prompt: Prompt | None = None,
    turn: int | None = None,
) -> str | None:
    """Send one streaming request and record its timeline; never raises but GreenletExit.

    Returns the reply's text when ``turn`` is set (a conversation carries it on), else None.
    """
    cfg = STATE.config
    assert cfg is not None and STATE.prompts is not None
    t_call = time.perf_counter()
    lag = None if intended is None else max(0.0, t_call - intended)
    step = STATE.step
    rid = next(STATE.ids)
    start_wall = time.time()
    STATE.sent += 1
    if len(STATE.in_flight) >= cfg.max_in_flight:
        _emit(RequestRecord(STATE.worker_id, step, start_wall, None, None, (), None, None,
                            "dropped: the client's in-flight cap was reached", lag))  # fmt: skip
        return None
    STATE.in_flight[rid] = start_wall
    p = prompt if prompt is not None else STATE.prompts.next()
    data = _body(p, cfg)
    trace_id, extra = None, b""
    if cfg.trace_context:
        trace_id = f"{random.getrandbits(128) | 1:032x}"
        span_id = f"{random.getrandbits(64) | 1:016x}"
        extra = f"traceparent: 00-{trace_id}-{span_id}-01\r\n".encode()
    sender = user.__dict__.get("_hr_sender")
    if sender is None:  # built before the clock starts: it is no part of the first request
        try:
            sender = user.__dict__["_hr_sender"] = _Sender(user)
        except ValueError as exc:  # a header or URL geventhttpclient will not send
            sender = exc
    parser = SseParser(keep_text=turn is not None)
    raw = None
    error: str | None = None
    t0 = time.perf_counter()
    if intended is not None:
        # Lateness up to the send itself: building the body is the generator's delay too.
        lag = max(0.0, t0 - intended)
        if STATE.max_lag is None or lag > STATE.max_lag:
            STATE.max_lag = lag
    end = t0
    first_kernel: bool | None = None
    body: worker_reader.Stream | None = None
    # One deadline for the whole request rather than a socket timeout, which gevent
    # enforces with a timer armed and cancelled around every read, i.e. every token. (A
    # new one each request: gevent's libev timer, stopped and started again, resumes what
    # was left of its time rather than starting afresh.)
    deadline = gevent.Timeout(cfg.request_timeout_s)
    deadline.start()
    try:
        if isinstance(sender, ValueError):
            raise sender
        # No Locust event per request: Locust's stats are not what the sweep reads.
        resp, rest, kernel, kwall = sender.send(data, extra)
        if resp.status_code >= 400:
            if rest:
                resp.feed(rest)
            error = _response_error(resp)
        else:
            raw = resp
            sock = raw._sock
            if sock is not None:
                # The deadline bounds every read from here on (and the next requests' on
                # this pooled connection, which all run under their own deadlines).
                sock.settimeout(None)
            kernel = kernel and sock is not None
            # Bytes read with the headers: their read's kernel stamp, else the client's clock.
            stamp, stamp_kernel = rxstamp.to_perf(kwall)
            plain = worker_reader.plain_socket(sock)
            if plain is not None:
                # The process's reader greenlet reads the body with every other stream's;
                # a chunked body it takes apart itself, past the HTTP parser.
                chunks = ChunkedBody() if rest is not None and _chunked(raw) else None
                body = worker_reader.Stream(raw, plain, kernel, parser, end, chunks)
                if chunks is None:
                    if rest:
                        raw.feed(rest)
                    body.take(stamp, stamp_kernel)
                elif rest:
                    body.feed(rest, stamp, stamp_kernel)
                if not raw.message_complete:
                    worker_reader.reader().read(body)
                end, error = body.end, body.error
                if error is not None:
                    raw.release()
            else:
                if rest:
                    raw.feed(rest)
                _n, end, first_kernel, error = _read_body(raw, kernel, parser, stamp, end)
            parser.finish(end)
            st = parser.state
            if error is None and st.error:
                error = st.error
            if error is None and st.token_events == 0:
                error = "the stream carried no tokens (not an OpenAI-compatible SSE stream?)"
    except gevent.Timeout as exc:
        if exc is not deadline:
            raise
        error = f"the request took over {cfg.request_timeout_s:g} s (--request-timeout)"
        if raw is not None:
            raw.release()  # closes the connection: the response is incomplete
    except gevent.GreenletExit:
        if raw is not None:
            raw.release()
        STATE.in_flight.pop(rid, None)
        raise
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"[:300]
        if raw is not None:
            raw.release()
    finally:
        deadline.close()
    if body is not None:  # read by the reader greenlet, however it ended
        end, first_kernel = max(end, body.end), body.first_kernel
    end = max(end, time.perf_counter()) if error else end
    st = parser.state
    e2e = end - t0
    ttft = None if st.first_token_at is None else st.first_token_at - t0
    out = st.completion_tokens if st.completion_tokens is not None else (st.token_events or None)
    STATE.in_flight.pop(rid, None)
    rec = RequestRecord(STATE.worker_id, step, start_wall, e2e, ttft, tuple(st.gaps),
                        st.prompt_tokens, out, error, lag, st.response_id,
                        None if ttft is None else first_kernel, p.input_tokens,
                        p.max_tokens, turn, trace_id)  # fmt: skip
    _emit(rec)
    if turn is None or error is not None:
        return None
    return "".join(st.text)


def _read_body(
    raw: Any, kernel: bool, parser: SseParser, stamp: float, end: float
) -> tuple[int, float, bool | None, str | None]:
    """Read a body in this greenlet (TLS): (bytes, last stamp, first token kernel-stamped, error)."""
    nbytes, first_kernel, error, stamp_kernel = 0, None, None, False
    # Read what has arrived, stamp it, parse it: the session's iter_content
    # waits for a full 1 KiB block and would delay each token.
    while True:
        buf = raw._body_buffer
        if buf:
            chunk = bytes(buf)
            del buf[:]
            nbytes += len(chunk)
            had_first = parser.state.first_token_at is not None
            parser.feed(chunk, stamp)
            if not had_first and parser.state.first_token_at is not None:
                first_kernel = stamp_kernel
            end = stamp
        if raw.message_complete:
            break
        sock = raw._sock
        if sock is None:
            error = "connection closed mid-stream"
            break
        if kernel:
            got, kwall = rxstamp.recv(sock, RECV_BYTES)
            stamp, stamp_kernel = rxstamp.to_perf(kwall)
        else:
            got = sock.recv(RECV_BYTES)
            stamp = time.perf_counter()
        if not got:
            error = "connection closed mid-stream"
            break
        raw.feed(got)
    return nbytes, end, first_kernel, error


def run_session(user: FastHttpUser, last: int | None = None) -> None:
    """One conversation: each turn sends the history so far plus a new user message.

    The context grows by the last question and its real reply every turn, as a chat
    client's does; a failed turn ends the session (a user would start over). ``last``:
    end it at that turn instead, whose reply asks for a random share of its tokens
    (a user's first conversation, to spread the users out: ``_dephased``).
    """
    cfg = STATE.config
    assert cfg is not None and STATE.prompts is not None
    history: list[dict] = []
    turns = cfg.turns if last is None else last
    for turn in range(1, turns + 1):
        nxt = STATE.prompts.next()
        if turn == last:
            nxt = _dephased(nxt)
        if nxt.messages is not None:
            user_msg = dict(nxt.messages[-1])
        else:
            user_msg = {"role": "user", "content": nxt.prompt or ""}
        messages = (*history, user_msg)
        # Only the first turn's length is the one asked for; later ones carry history too.
        asked = nxt.input_tokens if turn == 1 else None
        reply = stream_one(user, None, Prompt(None, messages, nxt.max_tokens, asked), turn)
        if reply is None:
            return
        history = [*messages, {"role": "assistant", "content": reply}]
        if turn < turns and cfg.think_time_s > 0:
            gevent.sleep(cfg.think_time_s)


def _emit(rec: RequestRecord) -> None:
    STATE.lines.append(rec)


def _take_lines() -> list[str]:
    """The lines waiting to be written, each record printed now: a flush's records in a row.

    At low load about one request ends an engine step, and a record printed as its request
    ends runs its code on caches gone cold since the last: printed with the rest of a flush
    it costs less (together with the prompts built ahead, about 5% of the worker's CPU at 64
    streams)."""
    lines, STATE.lines = STATE.lines, []
    return [x if type(x) is str else x.to_line() for x in lines]


class _StreamingUser(FastHttpUser):
    """What both kinds of user share. Each one's task loops by itself, so Locust has no
    pause to add between tasks; a request is sent once: a retry would hide its failure
    and time two attempts as one request."""

    abstract = True
    wait_time = constant(0)
    max_retries = 0


class ClosedLoopUser(_StreamingUser):
    """One stream at a time, back to back: the sweep's concurrency is the user count."""

    concurrency = 1

    @task
    def one(self) -> None:
        """The user's requests, back to back, until Locust kills the user.

        Locust would run this task once a request, and between two its task scheduling and
        a trip through gevent's hub (a wait time of 0 sleeps): a poll of every socket per
        request. Looping here skips both. Locust stops a user by killing its greenlet (no
        stop_timeout is set), mid-request as before.
        """
        cfg = STATE.config
        assert cfg is not None and STATE.prompts is not None
        loop = gevent.get_hub().loop
        while True:
            first = cfg.dephase and not self.__dict__.get("_hr_started")
            self._hr_started = True
            polls = loop.iteration
            if cfg.turns > 1:
                # The first conversation ends at a random turn, its last reply cut short: a
                # conversation's history is then always whole replies.
                run_session(self, random.randint(1, cfg.turns) if first else None)
            else:
                stream_one(self, None, _dephased(STATE.prompts.next()) if first else None)
            if loop.iteration == polls:
                # It never waited (dropped at the in-flight cap, a connection refused at
                # once): let the other greenlets run before the next.
                gevent.sleep(0)


def _dephased(p: Prompt) -> Prompt:
    """A user's first request, asking for a random share (uniform) of its reply's tokens.

    A step starts its users together. With replies of one length they would finish together
    and send again together, in waves, for the whole step: each wave's prompts reach the
    engine at once and queue for prefill, a TTFT no user population sees (a real one is not
    phase-locked). A closed loop's steady state has each user a uniform share of the way
    through its request at any instant, so a first request of a uniform share of the length
    starts the users there: their next requests are spread over one request's time, and
    stay spread (but for users whose requests an engine takes in the same step: they stay
    together). Shortening rather than delaying keeps every user's request in flight, so the
    step holds its concurrency throughout and the warm-up need cover only one request. A
    prompt's prefill is not shortened: with replies of a few tokens the spread is small.
    """
    return replace(p, max_tokens=1 + int(random.random() * p.max_tokens))


class OpenLoopUser(_StreamingUser):
    """One per process: starts requests on a Poisson or constant schedule, however many are open."""

    concurrency = 20000

    @task
    def dispatch(self) -> None:
        cfg = STATE.config
        assert cfg is not None
        if STATE.trace:
            self.replay()
            return
        group = gevent.pool.Group()
        rng = random.Random()
        rate, step = STATE.rate, STATE.step
        next_t = time.perf_counter()
        try:
            while True:
                if STATE.rate != rate or STATE.step != step:
                    rate, step = STATE.rate, STATE.step
                    next_t = time.perf_counter()
                if rate <= 0:
                    gevent.sleep(0.05)
                    continue
                now = time.perf_counter()
                if next_t > now:
                    # Short naps so a new step's rate takes effect promptly.
                    gevent.sleep(min(next_t - now, 0.05))
                    continue
                group.spawn(stream_one, self, next_t)
                gap = rng.expovariate(rate) if cfg.arrival == "poisson" else 1.0 / rate
                next_t += gap
        finally:
            group.kill(block=False)

    def replay(self) -> None:
        """Send the trace's requests on its own schedule, scaled by the step's speed.

        A new step (another speed) starts the trace again from its first entry.
        """
        cfg = STATE.config
        assert cfg is not None and STATE.prompts is not None
        group = gevent.pool.Group()
        step = None
        try:
            while True:
                if STATE.speed is None or STATE.step == step:
                    gevent.sleep(0.05)
                    continue
                step, speed = STATE.step, STATE.speed
                t0 = time.perf_counter()
                for e in STATE.trace:
                    if STATE.step != step:
                        break
                    due = t0 + e.at / speed
                    now = time.perf_counter()
                    while due > now and STATE.step == step:
                        gevent.sleep(min(due - now, 0.05))
                        now = time.perf_counter()
                    if STATE.step != step:
                        break
                    p = STATE.prompts.trace_prompt(e.input_length, e.output_length,
                                                   e.hash_ids, cfg.trace_block_tokens)  # fmt: skip
                    group.spawn(stream_one, self, due, p)
        finally:
            group.kill(block=False)


class StepShape(LoadTestShape):
    """Holds whatever step the sweep last asked for; the sweep decides when to move on."""

    def __init__(self) -> None:
        super().__init__()
        self.target: tuple[int, float] | None = None

    def tick(self) -> tuple[int, float] | None:
        return self.target


def _status(env: Environment) -> str:
    oldest = min(STATE.in_flight.values()) if STATE.in_flight else None
    runner = env.runner
    st = WorkerStatus(
        worker=STATE.worker_id,
        pid=os.getpid(),
        time=time.time(),
        cpu_seconds=time.process_time(),
        in_flight=len(STATE.in_flight),
        oldest_start=None if oldest is None else round(oldest, 6),
        step=STATE.step,
        users=runner.user_count if runner is not None else 0,
        sent=STATE.sent,
        max_lag=None if STATE.max_lag is None else round(STATE.max_lag, 6),
    )
    STATE.max_lag = None
    return st.to_line()


def _flusher(env: Environment, write) -> None:
    while True:
        gevent.sleep(FLUSH_S)
        lines = _take_lines()
        lines.append(_status(env))
        write(lines)


def _file_writer(path: str):
    fh = open(path, "a", encoding="utf-8", buffering=1 << 16)  # noqa: SIM115 (lives as long as the process)

    def write(lines: list[str]) -> None:
        if lines:
            fh.write("\n".join(lines) + "\n")
            fh.flush()

    return write


def _apply_step(cmd: dict, shape: StepShape, processes: int) -> None:
    STATE.step = int(cmd["step"])
    if cmd.get("speed") is not None:
        STATE.speed = float(cmd["speed"])
    if STATE.mode == "open":
        STATE.rate = float(cmd["rate"]) / max(1, processes)
        shape.target = (processes, float(processes))
    else:
        users = int(cmd["concurrency"])
        # Start every user at once: the sweep's warm-up covers the ramp, and each user's
        # first request (_dephased) spreads their later ones out.
        shape.target = (users, float(max(users, 1) * 100))


def _read_commands(env: Environment, shape: StepShape, processes_fn, write) -> None:
    stdin = FileObjectPosix(sys.stdin.fileno(), "rb")
    started = False
    while True:
        line = stdin.readline()
        if not line:
            break
        try:
            cmd = json.loads(line)
        except ValueError:
            continue
        if cmd.get("cmd") == "stop":
            break
        if cmd.get("cmd") != "step":
            continue
        n = processes_fn()
        _apply_step(cmd, shape, n)
        if env.runner is not None and hasattr(env.runner, "clients"):
            for client in list(env.runner.clients.values()):
                env.runner.send_message("hr_step", {"step": STATE.step, "rate": STATE.rate}, client.id)  # fmt: skip
        if not started:
            env.runner.start_shape()
            started = True
        elif shape.target is not None and env.runner.shape_last_tick != shape.target:
            # Locust's shape runner looks at the target once a second: each step would wait
            # up to a second for its users. Move now, and tell the runner it is done.
            users, rate = shape.target
            env.runner.start(user_count=users, spawn_rate=rate)
            env.runner.shape_last_tick = shape.target
        write([json.dumps({"k": "step", "step": STATE.step, "t": time.time()})])


class _QuietSpawnRate(logging.Filter):
    """Locust warns about spawn rates over 100; starting a step's users at once is the point."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "spawn rate is very high" not in record.getMessage()


def _read_config(path: Path) -> WorkerConfig | None:
    """The sweep's config, or None after one line on stderr. An external worker started from
    another checkout than the sweep's may not know a field a newer sweep writes: say so, not
    pydantic's traceback."""
    try:
        return WorkerConfig.model_validate_json(path.read_text(encoding="utf-8"))
    except OSError as exc:
        print(f"loadgen worker: cannot read the sweep's config {path}: {exc}", file=sys.stderr)
    except ValidationError as exc:
        unknown = [
            ".".join(map(str, e["loc"])) for e in exc.errors() if e["type"] == "extra_forbidden"
        ]
        if unknown:
            print(
                f"loadgen worker: the sweep's config has fields this worker does not know "
                f"({', '.join(unknown)}): run the same headroom version as the sweep on this host",
                file=sys.stderr,
            )
        else:
            first = exc.errors()[0]
            where = ".".join(map(str, first["loc"])) or "config"
            print(f"loadgen worker: the sweep's config {path} is not valid: {where}: "
                  f"{first['msg']}", file=sys.stderr)  # fmt: skip
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m loadgen.worker_locust")
    ap.add_argument("--role", choices=("local", "master", "worker"), default="local")
    ap.add_argument("--config", required=True, help="WorkerConfig JSON file the sweep wrote")
    ap.add_argument("--records", help="file to append records to (local, master)")
    ap.add_argument("--master-host", default="127.0.0.1")
    ap.add_argument("--master-port", type=int, default=5557)
    ap.add_argument("--master-bind", default="127.0.0.1")
    ap.add_argument("--expect-workers", type=int, default=0)
    ap.add_argument("--mode", choices=("closed", "open"), default="closed")
    ap.add_argument("--log-level", default="WARNING")
    args = ap.parse_args(argv)
    setup_logging(args.log_level)
    cfg = _read_config(Path(args.config))
    if cfg is None:
        return 1
    _setup(cfg)
    if args.role != "master":
        # Before the first request: a stream's first token is stamped by the kernel only
        # once the kernel's stamping is switched on (rxstamp's docstring).
        rxstamp.keep_on()
    STATE.mode = args.mode
    logging.getLogger("locust.runners").addFilter(_QuietSpawnRate())
    shape = StepShape()
    env = Environment(
        user_classes=[OpenLoopUser if args.mode == "open" else ClosedLoopUser],
        shape_class=shape,
        host=cfg.target.rstrip("/"),
        events=events,
    )
    if args.role == "worker":
        runner = env.create_worker_runner(args.master_host, args.master_port)

        def on_step(msg, **_kw) -> None:
            STATE.step = int(msg.data["step"])
            STATE.rate = float(msg.data["rate"])

        runner.register_message("hr_step", on_step)

        def send(lines: list[str]) -> None:
            runner.send_message("hr_lines", lines)

        gevent.spawn(_flusher, env, send)
        runner.greenlet.join()
        return 0

    if not args.records:
        ap.error("--records is required for the local and master roles")
    write = _file_writer(args.records)
    if args.role == "master":
        runner = env.create_master_runner(args.master_bind, args.master_port)
        runner.register_message("hr_lines", lambda msg, **_kw: write(msg.data))
        deadline = time.monotonic() + 120
        while runner.worker_count < args.expect_workers and time.monotonic() < deadline:
            gevent.sleep(0.1)
        if runner.worker_count < args.expect_workers:
            write([json.dumps({"k": "fatal", "msg": f"only {runner.worker_count} of "
                               f"{args.expect_workers} Locust workers connected"})])  # fmt: skip
            return 2

        def processes() -> int:
            return max(1, runner.worker_count)

        write([json.dumps({"k": "ready", "workers": runner.worker_count, "t": time.time()})])
    else:
        runner = env.create_local_runner()
        gevent.spawn(_flusher, env, write)

        def processes() -> int:
            return 1

        write([json.dumps({"k": "ready", "workers": 1, "t": time.time()})])
    try:
        _read_commands(env, shape, processes, write)
    finally:
        runner.quit()
        lines = _take_lines()
        if args.role == "local":
            lines.append(_status(env))
        write(lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
