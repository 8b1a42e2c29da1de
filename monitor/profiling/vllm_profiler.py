"""Drive vLLM's own torch profiler: POST /start_profile, wait, POST /stop_profile, find the traces.

vLLM 0.32 serves those endpoints only when started with its profiler on
(``--profiler-config '{"profiler": "torch", "torch_profiler_dir": "/abs/dir"}'``;
releases before the profiler config read ``VLLM_TORCH_PROFILER_DIR``); otherwise
they are 404. On stop, each worker writes ``<rank>.<stamp>.pt.trace.json.gz`` (CPU
ops and, on a GPU, kernels) and the API server ``<host>.async_llm.<stamp>...``
(its own CPU) into that directory, which takes seconds to tens of seconds.
"""

from __future__ import annotations

import json
import os
import shlex
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import httpx

from monitor.profiling.pyspy import ProfileError

TURN_ON = (
    'restart vLLM with --profiler-config \'{"profiler": "torch", "torch_profiler_dir": '
    '"/abs/dir", "torch_profiler_with_stack": false, '
    '"torch_profiler_dump_cuda_time_total": false}\' (the last two keep the trace small and '
    "the stop quick; releases before the profiler config read VLLM_TORCH_PROFILER_DIR=/abs/dir);"
    " profiling slows the engine while it runs"
)
TRACE_GLOB = "*.pt.trace.json*"


def base_url(url: str) -> str:
    u = url.rstrip("/")
    if "://" not in u:
        u = "http://" + u
    return u.removesuffix("/metrics").removesuffix("/v1")


def _post(client: httpx.Client, url: str, what: str) -> None:
    try:
        resp = client.post(url)
    except httpx.HTTPError as exc:
        raise ProfileError(f"{url}: {type(exc).__name__}: {exc}".rstrip(": ")) from None
    if resp.status_code in (404, 405):
        raise ProfileError(
            f"vLLM's profiler is off ({what} answered {resp.status_code}): {TURN_ON}"
        )
    if resp.status_code >= 400:
        raise ProfileError(f"{url}: HTTP {resp.status_code}: {resp.text.strip()[:200]}")


def dir_from_cmdline(argv: Sequence[str], environ: dict[str, str]) -> str | None:
    """The trace directory a vLLM command line (or its environment) names, if any."""
    for i, arg in enumerate(argv):
        value = None
        if arg == "--profiler-config" and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith("--profiler-config="):
            value = arg.split("=", 1)[1]
        elif arg.startswith("--profiler-config.torch_profiler_dir"):
            return (
                arg.split("=", 1)[1] if "=" in arg else (argv[i + 1] if i + 1 < len(argv) else None)
            )
        if value is not None:
            try:
                cfg = json.loads(value)
            except ValueError:
                continue
            if isinstance(cfg, dict) and cfg.get("torch_profiler_dir"):
                return str(cfg["torch_profiler_dir"])
    return environ.get("VLLM_TORCH_PROFILER_DIR") or None


def find_trace_dir(url: str) -> str | None:
    """Where a local vLLM writes its traces, from the command line of the process on its port."""
    from monitor.sources.build import local_ports
    from monitor.sources.host import _listeners

    ports = local_ports([url])
    if not ports:
        return None
    try:
        found, _ = _listeners(set(ports))
    except Exception:
        return None
    for pids in found.values():
        for pid in sorted(pids):
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                env_raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            env = dict(kv.decode(errors="replace").split("=", 1) for kv in env_raw if b"=" in kv)
            found_dir = dir_from_cmdline([a.decode(errors="replace") for a in argv if a], env)
            if found_dir:
                return found_dir
    return None


def new_traces(trace_dir: Path, since: float) -> list[Path]:
    out = []
    for p in trace_dir.glob(TRACE_GLOB):
        try:
            if p.stat().st_mtime >= since - 1.0:
                out.append(p)
        except OSError:
            continue
    return sorted(out)


def worker_first(paths: Sequence[Path]) -> list[Path]:
    """The workers' traces (kernels, CPU ops) before the API server's (its own Python only)."""
    return sorted(paths, key=lambda p: ("async_llm" in p.name, p.name))


def run_profile(
    url: str,
    seconds: float,
    trace_dir: str | None = None,
    timeout: float = 120.0,
    settle_s: float = 2.0,
    sleep: Callable[[float], None] = time.sleep,
) -> list[Path]:
    """Profile for ``seconds`` and return the trace files written; ProfileError on any refusal."""
    if seconds <= 0:
        raise ProfileError("--seconds must be positive")
    base = base_url(url)
    where = trace_dir or find_trace_dir(base)
    if where is None:
        raise ProfileError(
            f"cannot tell where {base} writes its traces (not a local process, or its "
            "command line does not say): give --trace-dir DIR, the torch_profiler_dir it was "
            "started with"
        )
    tdir = Path(where)
    if not tdir.is_dir():
        raise ProfileError(f"trace directory {tdir} does not exist here (is vLLM on another host?)")
    if not os.access(tdir, os.R_OK):
        raise ProfileError(f"cannot read trace directory {tdir}: run as vLLM's user")
    started = time.time()
    with httpx.Client(timeout=timeout) as client:
        _post(client, base + "/start_profile", "/start_profile")
        try:
            sleep(seconds)
        finally:
            # Stop even on Ctrl-C: a profiler left running slows the engine until restart.
            _post(client, base + "/stop_profile", "/stop_profile")
    deadline = time.monotonic() + settle_s
    traces = new_traces(tdir, started)
    while not traces and time.monotonic() < deadline:
        sleep(0.2)
        traces = new_traces(tdir, started)
    if not traces:
        raise ProfileError(
            f"vLLM stopped its profiler but wrote no trace under {tdir} (a remote vLLM writes "
            "on its own host; check its log)"
        )
    return worker_first(traces)


def shell_quote(args: Sequence[str]) -> str:
    return " ".join(shlex.quote(a) for a in args)
