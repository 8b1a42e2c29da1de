"""The box's HTTP face: an OpenAI-compatible API as vLLM serves it, ``/metrics``, ``/gpu/metrics``.

The simulated model has no tokenizer: a prompt's tokens are its whitespace-separated
words (or the ids, for a list of token ids), and each generated token is one word.
Streamed events are built from per-request templates, not ``json.dumps``, so one
core keeps hundreds of streams going.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
import zlib
from typing import Any

from aiohttp import web

from simulator.config import SimConfig
from simulator.engine import Emission, Request
from simulator.errors import SimConfigError
from simulator.metrics import render_dcgm, render_vllm
from simulator.otlp import SpanExporter, TraceParent, new_span, parse_traceparent
from simulator.realtime import EngineThread
from simulator.scenarios import SCENARIOS, build

log = logging.getLogger(__name__)

VERSION = "0.32.0+headroom.sim"
VOCAB = tuple(
    " " + w
    for w in (
        "the of and to in a is that for it as was with be by on not he this are or his from at "
        "which but have an they you were her she there been one all we their has would when if "
        "so no will more can who out"
    ).split()
)
_CHAT_TEMPLATE_TOKENS = 4  # role markers and separators around each message


class ApiError(Exception):
    def __init__(self, status: int, err_type: str, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.err_type, self.message, self.param = status, err_type, message, param


def error_response(
    status: int, err_type: str, message: str, param: str | None = None
) -> web.Response:
    # vLLM's ErrorResponse: {"error": {"message", "type", "param", "code"}}, code = HTTP status.
    body = {"error": {"message": message, "type": err_type, "param": param, "code": status}}
    return web.json_response(body, status=status)


def _bad(message: str, param: str | None = None) -> ApiError:
    return ApiError(400, "BadRequestError", message, param)


def count_words(text: str) -> int:
    return len(text.split())


def prompt_tokens(prompt: Any) -> int:
    if prompt is None:
        raise _bad("Either prompt or prompt_embeds must be provided and non-empty.", "prompt")
    if isinstance(prompt, list) and prompt and all(isinstance(p, (str, list)) for p in prompt):
        if len(prompt) != 1:
            raise _bad(f"The simulator serves one prompt per request, got {len(prompt)}.", "prompt")
        prompt = prompt[0]
    if isinstance(prompt, str):
        n = count_words(prompt)
    elif isinstance(prompt, list) and all(
        isinstance(t, int) and not isinstance(t, bool) for t in prompt
    ):
        n = len(prompt)
    else:
        raise _bad("prompt must be a string, a list of strings or a list of token ids.", "prompt")
    if n == 0:
        raise _bad("Prompt cannot be empty.", "prompt")
    return n


def chat_tokens(messages: Any) -> int:
    if not isinstance(messages, list) or not messages:
        raise _bad("messages must be a non-empty list.", "messages")
    n = 0
    for m in messages:
        if not isinstance(m, dict) or "role" not in m:
            raise _bad("each message must be an object with a role.", "messages")
        content = m.get("content") or ""
        if isinstance(content, list):  # content parts: count the text ones
            content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
        if not isinstance(content, str):
            raise _bad("message content must be a string or a list of parts.", "messages")
        n += count_words(content) + _CHAT_TEMPLATE_TOKENS
    return n


def prompt_words(body: dict[str, Any], chat: bool) -> list[str]:
    """The prompt as the simulated model's tokens: words, with chat template markers."""
    if chat:
        out: list[str] = []
        for m in body.get("messages") or []:
            if not isinstance(m, dict):
                continue
            content = m.get("content") or ""
            if isinstance(content, list):
                content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
            role = str(m.get("role", ""))
            out += [
                f"<|{role}|>",
                *str(content).split(),
                *["<|sep|>"] * (_CHAT_TEMPLATE_TOKENS - 1),
            ]
        return out
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]
    if isinstance(prompt, str):
        return prompt.split()
    if isinstance(prompt, list):
        return [str(t) for t in prompt]
    return []


def block_hashes(words: list[str], block_size: int) -> tuple[int, ...]:
    """Chained hashes of the full blocks: a block matches only after the same prefix."""
    out, h = [], 0
    for i in range(0, len(words) - block_size + 1, block_size):
        h = zlib.crc32(" ".join(words[i : i + block_size]).encode(), h)
        out.append(h)
    return tuple(out)


class TokenStream:
    """What the engine produced for one HTTP request and not yet sent; lives on the event loop."""

    __slots__ = ("pending", "finish", "_waiter", "_loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.pending = 0
        self.finish: str | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._loop = loop

    def push(self, n: int, finish: str | None) -> None:
        self.pending += n
        if finish is not None:
            self.finish = finish
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    async def take(self) -> tuple[int, str | None]:
        if not self.pending and self.finish is None:
            self._waiter = self._loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        n, self.pending = self.pending, 0
        return n, self.finish


class SimServer:
    def __init__(self, engine: EngineThread, spans: SpanExporter | None = None) -> None:
        self.engine = engine
        self.spans = spans
        # Spans carry wall-clock times; the engine's clock is monotonic. One offset, taken
        # once, keeps every span's times on the same scale as the engine's own.
        self._wall_offset = time.time() - engine.clock()
        self.loop: asyncio.AbstractEventLoop | None = None

    # -- wiring --------------------------------------------------------------------

    def app(self) -> web.Application:
        app = web.Application(client_max_size=16 * 2**20)
        app.router.add_get("/health", self.health)
        app.router.add_get("/version", self.version)
        app.router.add_get("/v1/models", self.models)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/chat/completions", self.chat_completions)
        app.router.add_post("/tokenize", self.tokenize)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_get("/gpu/metrics", self.gpu_metrics)
        app.router.add_get("/server_info", self.server_info)
        app.router.add_get("/sim/scenario", self.get_scenario)
        app.router.add_post("/sim/scenario", self.set_scenario)
        app.on_startup.append(self._on_startup)
        return app

    async def _on_startup(self, app: web.Application) -> None:
        self.loop = asyncio.get_running_loop()
        self.engine.deliver = self._deliver_threadsafe

    def _deliver_threadsafe(self, emissions: list[Emission]) -> None:
        loop = self.loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._dispatch, emissions)

    @staticmethod
    def _dispatch(emissions: list[Emission]) -> None:
        for em in emissions:
            sink = em.request.sink
            if sink is not None:
                sink(em.new_tokens, em.finish_reason)

    @property
    def model_name(self) -> str:
        return self.engine.cfg.engine.model_name

    # -- plain endpoints -----------------------------------------------------------

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def version(self, request: web.Request) -> web.Response:
        return web.json_response({"version": VERSION})

    async def models(self, request: web.Request) -> web.Response:
        e = self.engine.cfg.engine
        card = {
            "id": e.model_name,
            "object": "model",
            "created": int(time.time()),
            "owned_by": "vllm",
            "root": e.model_name,
            "parent": None,
            "max_model_len": e.max_model_len,
        }
        return web.json_response({"object": "list", "data": [card]})

    async def metrics(self, request: web.Request) -> web.Response:
        with self.engine.cond:
            text = render_vllm(self.engine.box.core, self.engine.stats)
        return web.Response(text=text, content_type="text/plain", charset="utf-8")

    async def gpu_metrics(self, request: web.Request) -> web.Response:
        with self.engine.cond:
            box = self.engine.box
            now = self.engine.clock()
            act = box.gpu_activity(now)
            text = render_dcgm(box.cfg.engine, box.core.num_blocks, act, box.gpu_energy_j(now))
        return web.Response(text=text, content_type="text/plain", charset="utf-8")

    async def server_info(self, request: web.Request) -> web.Response:
        """What vLLM's dev-mode /server_info gives: its config, the caps among it."""
        e = self.engine.cfg.engine
        config = {
            "model_config": {"model": e.model_name, "max_model_len": e.max_model_len},
            "scheduler_config": {
                "max_num_seqs": e.max_num_seqs,
                "max_num_batched_tokens": e.max_num_batched_tokens,
                "enable_chunked_prefill": e.chunked_prefill,
            },
            "cache_config": {
                "block_size": e.block_size,
                "num_gpu_blocks": self.engine.box.core.num_blocks,
            },
        }
        as_json = request.query.get("config_format") == "json"
        return web.json_response(
            {"vllm_config": config if as_json else json.dumps(config), "vllm_env": {}}
        )

    async def get_scenario(self, request: web.Request) -> web.Response:
        cfg = self.engine.cfg
        return web.json_response(
            {
                "scenario": cfg.scenario,
                "summary": cfg.summary,
                "load": self.engine.load_enabled,
                "scenarios": {name: s.summary for name, s in SCENARIOS.items()},
            }
        )

    async def set_scenario(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
            name = body["scenario"]
            cfg: SimConfig = build(name)
        except (ValueError, KeyError, TypeError):
            return error_response(400, "BadRequestError", 'send {"scenario": NAME}', "scenario")
        except SimConfigError as exc:
            return error_response(400, "BadRequestError", str(exc), "scenario")
        self.engine.switch(cfg)
        return web.json_response({"scenario": cfg.scenario, "summary": cfg.summary})

    # -- the OpenAI API ------------------------------------------------------------

    async def _body(self, request: web.Request) -> dict[str, Any]:
        try:
            body = await request.json()
        except ValueError:
            raise _bad("The request body is not valid JSON.") from None
        if not isinstance(body, dict):
            raise _bad("The request body must be a JSON object.")
        model = body.get("model")
        if model is not None and model != self.model_name:
            raise ApiError(404, "NotFoundError", f"The model `{model}` does not exist.", "model")
        n = body.get("n", 1)
        if n != 1:
            raise _bad("The simulator generates one choice per request (n=1).", "n")
        return body

    def _limits(self, body: dict[str, Any], prompt: int, chat: bool) -> tuple[int, bool, bool]:
        e = self.engine.cfg.engine
        key = (
            "max_completion_tokens"
            if chat and body.get("max_completion_tokens") is not None
            else "max_tokens"
        )
        max_tokens = body.get(key)
        if max_tokens is None:
            # vLLM: completions default to 16 tokens, chat to whatever the context leaves.
            max_tokens = max(1, e.max_model_len - prompt) if chat else 16
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool):
            raise _bad(f"{key} must be an integer, got {max_tokens!r}.", key)
        if max_tokens < 1:
            raise _bad(f"{key} must be at least 1, got {max_tokens}.", key)
        if prompt + max_tokens > e.max_model_len:
            raise _bad(
                f"This model's maximum context length is {e.max_model_len} tokens. However, you "
                f"requested {prompt + max_tokens} tokens ({prompt} in the messages, {max_tokens} in "
                f"the completion). Please reduce the length of the messages or completion.",
                key,
            )
        stream = body.get("stream", False)
        if not isinstance(stream, bool):
            raise _bad("stream must be a boolean.", "stream")
        opts = body.get("stream_options")
        if opts is not None and not stream:
            raise _bad("Stream options can only be defined when `stream=True`.", "stream_options")
        if opts is not None and not isinstance(opts, dict):
            raise _bad("stream_options must be an object.", "stream_options")
        include_usage = bool(opts.get("include_usage")) if isinstance(opts, dict) else False
        ignore_eos = body.get("ignore_eos", False)
        if not isinstance(ignore_eos, bool):
            raise _bad("ignore_eos must be a boolean.", "ignore_eos")
        return max_tokens, include_usage, ignore_eos

    async def tokenize(self, request: web.Request) -> web.Response:
        """vLLM's /tokenize: the prompt (or chat messages) as the model's tokens."""
        try:
            body = await self._body(request)
            chat = body.get("messages") is not None
            n = chat_tokens(body.get("messages")) if chat else prompt_tokens(body.get("prompt"))
        except ApiError as exc:
            return error_response(exc.status, exc.err_type, exc.message, exc.param)
        words = prompt_words(body, chat)[:n]
        ids = [zlib.crc32(w.encode()) % 32000 for w in words]
        return web.json_response(
            {"count": n, "max_model_len": self.engine.cfg.engine.max_model_len, "tokens": ids}
        )

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, chat=False)

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, chat=True)

    async def _serve(self, request: web.Request, chat: bool) -> web.StreamResponse:
        try:
            body = await self._body(request)
            prompt = (
                chat_tokens(body.get("messages")) if chat else prompt_tokens(body.get("prompt"))
            )
            max_tokens, include_usage, ignore_eos = self._limits(body, prompt, chat)
        except ApiError as exc:
            return error_response(exc.status, exc.err_type, exc.message, exc.param)
        assert self.loop is not None
        stream = TokenStream(self.loop)
        req = Request(prompt, max_tokens, arrival=0.0, ignore_eos=ignore_eos, sink=stream.push)
        if self.engine.cfg.engine.prefix_caching:
            req.block_hashes = block_hashes(
                prompt_words(body, chat), self.engine.cfg.engine.block_size
            )
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        if self.spans is not None:
            self._trace(req, rid, parse_traceparent(request.headers.get("traceparent")))
        self.engine.submit(req)
        done = False
        try:
            if body.get("stream"):
                resp = await self._stream(request, req, stream, rid, chat, include_usage)
            else:
                resp = await self._whole(req, stream, rid, chat)
            done = True
            return resp
        finally:
            if not done or stream.finish is None:
                self.engine.abort(req)

    def _trace(self, req: Request, rid: str, parent: TraceParent | None) -> None:
        """Send the request's span when it finishes, as vLLM's output processor does."""
        spans, offset = self.spans, self._wall_offset
        assert spans is not None

        # Runs on the engine thread, under its lock, with the times its histograms just
        # observed: only arithmetic and an append here; the exporter's thread does the rest.
        def finished(r: Request, now: float) -> None:
            scheduled, first = r.first_scheduled, r.first_token
            if r.finish_reason == "abort" or scheduled is None or first is None:
                return  # vLLM sends no span for an aborted request
            last = r.last_token if r.last_token is not None else now
            attrs = (
                ("gen_ai.latency.time_to_first_token", first - r.arrival),
                ("gen_ai.latency.e2e", now - r.arrival),
                ("gen_ai.latency.time_in_queue", scheduled - r.arrival),
                ("gen_ai.usage.prompt_tokens", r.prompt_tokens),
                ("gen_ai.usage.completion_tokens", r.output),
                ("gen_ai.latency.time_in_model_prefill", first - scheduled),
                ("gen_ai.latency.time_in_model_decode", last - first),
                ("gen_ai.latency.time_in_model_inference", last - scheduled),
                ("gen_ai.request.id", rid),
                ("gen_ai.request.max_tokens", r.max_tokens),
                ("gen_ai.request.n", 1),
            )
            start_ns = int((r.arrival + offset) * 1e9)
            spans.add(new_span(parent, start_ns, int((now + offset) * 1e9), attrs))

        req.on_finish = finished

    async def _whole(self, req: Request, stream: TokenStream, rid: str, chat: bool) -> web.Response:
        produced, finish = 0, None
        while finish is None:
            n, finish = await stream.take()
            produced += n
        text = "".join(VOCAB[(req.rid + k) % len(VOCAB)] for k in range(produced))
        usage = {
            "prompt_tokens": req.prompt_tokens,
            "total_tokens": req.prompt_tokens + produced,
            "completion_tokens": produced,
            "prompt_tokens_details": None,
        }
        choice: dict[str, Any] = {
            "index": 0,
            "logprobs": None,
            "finish_reason": finish,
            "stop_reason": None,
        }
        if chat:
            choice["message"] = {"role": "assistant", "content": text, "tool_calls": []}
            obj = "chat.completion"
        else:
            choice["text"] = text
            choice["prompt_logprobs"] = None
            obj = "text_completion"
        body = {
            "id": rid,
            "object": obj,
            "created": int(time.time()),
            "model": self.model_name,
            "choices": [choice],
            "usage": usage,
        }
        return web.json_response(body)

    async def _stream(
        self,
        request: web.Request,
        req: Request,
        stream: TokenStream,
        rid: str,
        chat: bool,
        include_usage: bool,
    ) -> web.StreamResponse:
        resp = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await resp.prepare(request)
        try:
            await self._stream_body(resp, req, stream, rid, chat, include_usage)
        except ConnectionResetError:
            # The client went away mid-stream (a sweep's step ends, a timeout): normal for a
            # server, so one line at debug rather than aiohttp's traceback for each stream.
            log.debug("client closed %s before it finished", rid)
        return resp

    async def _stream_body(
        self,
        resp: web.StreamResponse,
        req: Request,
        stream: TokenStream,
        rid: str,
        chat: bool,
        include_usage: bool,
    ) -> None:
        created = int(time.time())
        obj = "chat.completion.chunk" if chat else "text_completion"
        head = f'data: {{"id":"{rid}","object":"{obj}","created":{created},"model":{json.dumps(self.model_name)},"choices":[{{"index":0,'
        if chat:
            await resp.write(
                (
                    head
                    + '"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}\n\n'
                ).encode()
            )
            open_text, close_text = '"delta":{"content":"', '"},"logprobs":null,"finish_reason":'
        else:
            open_text, close_text = '"text":"', '","logprobs":null,"finish_reason":'
        tail_null = 'null,"stop_reason":null}]}\n\n'
        sent, base, nv = 0, req.rid, len(VOCAB)
        while True:
            n, finish = await stream.take()
            parts = []
            for k in range(n):
                word = VOCAB[(base + sent + k) % nv]
                if finish is not None and k == n - 1:
                    parts.append(
                        f'{head}{open_text}{word}{close_text}"{finish}","stop_reason":null}}]}}\n\n'
                    )
                else:
                    parts.append(f"{head}{open_text}{word}{close_text}{tail_null}")
            sent += n
            if finish is not None:
                if n == 0:  # ended without a new token (aborted)
                    parts.append(
                        f'{head}{open_text}{close_text}"{finish}","stop_reason":null}}]}}\n\n'
                    )
                if include_usage:
                    usage = {
                        "prompt_tokens": req.prompt_tokens,
                        "total_tokens": req.prompt_tokens + sent,
                        "completion_tokens": sent,
                    }
                    parts.append(
                        f'data: {{"id":"{rid}","object":"{obj}","created":{created},'
                        f'"model":{json.dumps(self.model_name)},"choices":[],"usage":{json.dumps(usage)}}}\n\n'
                    )
                parts.append("data: [DONE]\n\n")
            await resp.write("".join(parts).encode())
            if finish is not None:
                break
        await resp.write_eof()


async def start_server(
    cfg: SimConfig, host: str, port: int, load: bool, otlp_traces_endpoint: str | None = None
) -> tuple[web.AppRunner, EngineThread, int]:
    """Start the engine thread and the HTTP server on the running loop; return the bound port.

    With ``otlp_traces_endpoint`` each finished API request's span goes there; the spans
    still queued are sent when the runner is cleaned up.
    """
    engine = EngineThread(cfg, load=load)
    spans = SpanExporter(otlp_traces_endpoint) if otlp_traces_endpoint else None
    server = SimServer(engine, spans)
    app = server.app()
    if spans is not None:
        exporter = spans

        async def close_spans(app: web.Application) -> None:
            await asyncio.to_thread(exporter.close)

        app.on_cleanup.append(close_spans)
    # On SIGTERM a request still queued behind other traffic would hold the shutdown for
    # aiohttp's default 60 s: the stopped engine never serves it. A second is enough for the
    # spans still queued; the handlers still waiting are then cancelled.
    runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=2048)
    await site.start()
    if spans is not None:
        spans.start()
    engine.start()
    bound = port
    for addr in runner.addresses:
        if isinstance(addr, tuple):
            bound = addr[1]
            break
    return runner, engine, bound
