"""A tiny OpenAI-compatible SSE server for the load generator's tests (run as a subprocess).

It streams ``max_tokens`` tokens, the first after ``--ttft`` seconds and then one
every ``--itl`` seconds, admits at most ``--cap`` requests at once (the rest
wait, as a scheduler's sequence cap makes them), and serves vLLM-style
``/metrics`` gauges for running and waiting and the engine's TTFT histogram.
``--gateway-delay`` holds each request that long before the engine sees it (a proxy in
front of the engine: the client's TTFT includes it, the engine's does not). ``--mode``
breaks it on purpose.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import sys
import time

from aiohttp import web

TTFT_BOUNDS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.5, 5.0)


def build_app(
    ttft: float,
    itl: float,
    cap: int,
    model: str,
    mode: str,
    fail_above: int | None = None,
    gateway_delay: float = 0.0,
) -> web.Application:
    sem = asyncio.Semaphore(cap)
    ids = itertools.count()
    state = {"running": 0, "waiting": 0, "success": 0, "gen": 0}
    ttfts: list[float] = []

    async def models(_req: web.Request) -> web.Response:
        if mode == "not-openai":
            return web.Response(text="<html>hello</html>", content_type="text/html")
        return web.json_response({"object": "list", "data": [{"id": model, "object": "model"}]})

    async def metrics(_req: web.Request) -> web.Response:
        lab = f'{{engine="0",model_name="{model}"}}'
        text = (
            f"vllm:num_requests_running{lab} {state['running']}\n"
            f"vllm:num_requests_waiting{lab} {state['waiting']}\n"
            f"vllm:request_success_total{lab} {state['success']}\n"
            f"vllm:generation_tokens_total{lab} {state['gen']}\n"
        )
        if ttfts:
            name = "vllm:time_to_first_token_seconds"
            for le in TTFT_BOUNDS:
                n = sum(1 for t in ttfts if t <= le)
                text += f'{name}_bucket{{engine="0",le="{le}",model_name="{model}"}} {n}\n'
            text += f'{name}_bucket{{engine="0",le="+Inf",model_name="{model}"}} {len(ttfts)}\n'
            text += f"{name}_sum{lab} {sum(ttfts)}\n{name}_count{lab} {len(ttfts)}\n"
        return web.Response(text=text, content_type="text/plain")

    async def complete(req: web.Request) -> web.StreamResponse:
        body = await req.json()
        if body.get("model") != model:
            return web.json_response(
                {"error": {"message": f"model {body.get('model')} not found"}}, status=404
            )
        busy = state["running"] + state["waiting"]
        if mode == "fail" or (fail_above is not None and busy >= fail_above):
            return web.json_response({"error": {"message": "boom"}}, status=500)
        chat = req.path.endswith("/chat/completions")
        n = int(body.get("max_tokens", 16))
        if gateway_delay:
            await asyncio.sleep(gateway_delay)
        arrived = time.monotonic()
        state["waiting"] += 1
        await sem.acquire()
        state["waiting"] -= 1
        state["running"] += 1
        try:
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(req)
            t0 = time.monotonic()
            rid = f"cmpl-fake{next(ids)}"
            for i in range(n):
                due = t0 + ttft + i * itl
                delay = due - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                if chat:
                    chunk = {"id": rid, "choices": [{"index": 0, "delta": {"content": f" t{i}"}}]}
                else:
                    chunk = {"id": rid, "choices": [{"index": 0, "text": f" t{i}"}]}
                await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                if i == 0:
                    ttfts.append(time.monotonic() - arrived)
                state["gen"] += 1
            opts = body.get("stream_options") or {}
            if opts.get("include_usage"):
                usage = {"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": n}}
                await resp.write(b"data: " + json.dumps(usage).encode() + b"\n\n")
            await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
            state["success"] += 1
            return resp
        except ConnectionResetError:
            # The client left mid-stream (a sweep's step ended, Ctrl-C): as a real server,
            # stop writing quietly rather than log a traceback.
            return resp
        finally:
            state["running"] -= 1
            sem.release()

    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_get("/metrics", metrics)
    app.router.add_post("/v1/completions", complete)
    app.router.add_post("/v1/chat/completions", complete)
    return app


async def _serve(args: argparse.Namespace) -> None:
    app = build_app(
        args.ttft, args.itl, args.cap, args.model, args.mode, args.fail_above, args.gateway_delay
    )
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", args.port)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    print(port, flush=True)
    await asyncio.Event().wait()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--ttft", type=float, default=0.05)
    ap.add_argument("--itl", type=float, default=0.01)
    ap.add_argument("--cap", type=int, default=1000)
    ap.add_argument("--model", default="fake-model")
    ap.add_argument("--fail-above", type=int, help="answer HTTP 500 when this many are already in")
    ap.add_argument("--gateway-delay", type=float, default=0.0)
    ap.add_argument("--mode", default="ok", choices=("ok", "fail", "not-openai"))
    args = ap.parse_args()
    try:
        asyncio.run(_serve(args))
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
