"""Start the simulator in its own process and hand back a handle to it.

A subprocess keeps the engine's real CPU burn away from the caller's GIL (a TUI,
a test), and gives a host monitor a PID to watch as it would vLLM's engine core.
It runs in a new process group of the caller's session: a new session
(``setsid``) gets its own CPU share from the kernel's autogroup scheduling, and
on two cores the busy engine then starves the server beside it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from simulator.cli import READY_PREFIX, resolve
from simulator.errors import SimConfigError, SimStartError
from simulator.otlp import check_endpoint
from simulator.scenarios import SCENARIOS

_ROOT = Path(__file__).resolve().parent.parent


class SimHandle:
    """A running simulator process. ``stop()`` (or leaving a ``with`` block) ends it."""

    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        url: str,
        scenario: str,
        log_path: str,
        temp_config: str | None = None,
    ) -> None:
        self._proc = proc
        self.url = url
        self.metrics_url = url + "/metrics"
        self.gpu_metrics_url = url + "/gpu/metrics"
        self.pid = proc.pid
        self.scenario = scenario
        self.log_path = log_path  # the child's stderr, removed by stop()
        self._temp_config = temp_config

    def __repr__(self) -> str:
        return f"SimHandle(url={self.url!r}, scenario={self.scenario!r}, pid={self.pid})"

    @property
    def running(self) -> bool:
        return self._proc.poll() is None

    def set_scenario(self, name: str, timeout: float = 30.0) -> None:
        """Switch the running box to another scenario (requests in flight end with abort)."""
        if name not in SCENARIOS:
            raise SimConfigError(f"unknown scenario {name!r} (one of: {', '.join(SCENARIOS)})")
        data = json.dumps({"scenario": name}).encode()
        req = urllib.request.Request(
            self.url + "/sim/scenario", data=data, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                resp.read()
        except (urllib.error.URLError, OSError) as exc:
            raise SimStartError(
                f"simulator at {self.url} did not switch to {name}: {exc}"
            ) from None
        self.scenario = name

    def stop(self, timeout: float = 15.0) -> None:
        if self._proc.poll() is None:
            try:
                os.killpg(self._proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self._proc.wait(timeout)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(self._proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self._proc.wait(timeout)
        if self._proc.stdout is not None:
            self._proc.stdout.close()
        for path in (self.log_path, self._temp_config):
            if path:
                Path(path).unlink(missing_ok=True)

    def __enter__(self) -> SimHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _read_ready(proc: subprocess.Popen[bytes], timeout: float) -> str | None:
    """The URL the child announces on stdout, or None if it dies or stays silent."""
    found: list[str] = []

    def reader() -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.decode(errors="replace").strip()
            if line.startswith(READY_PREFIX):
                found.append(line[len(READY_PREFIX) :].split()[0])
                return

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    t.join(timeout)
    return found[0] if found else None


def _wait_health(url: str, deadline: float) -> bool:
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/health", timeout=5) as resp:
                if resp.status == 200:
                    return True
        except (urllib.error.URLError, OSError):
            time.sleep(0.1)
    return False


def start_sim(
    scenario: str = "starved",
    host: str = "127.0.0.1",
    port: int = 0,
    load: bool = True,
    config: str | os.PathLike[str] | dict[str, Any] | None = None,
    timeout: float = 60.0,
    otlp_traces_endpoint: str | None = None,
) -> SimHandle:
    """Start ``python -m simulator`` in a new process group; return once /health answers.

    ``config`` is a TOML/YAML file or a dict of the same shape
    (``{"engine": {"max_num_seqs": 4}, "load": {...}}``) laid over the scenario.
    ``otlp_traces_endpoint``: where the box sends each finished request's trace span.
    """
    if scenario not in SCENARIOS:
        raise SimConfigError(f"unknown scenario {scenario!r} (one of: {', '.join(SCENARIOS)})")
    cmd = [sys.executable, "-m", "simulator", "--scenario", scenario, "--listen", f"{host}:{port}"]
    if not load:
        cmd.append("--no-load")
    if otlp_traces_endpoint is not None:
        cmd += ["--otlp-traces-endpoint", check_endpoint(otlp_traces_endpoint)]
    cmd += ["--exit-with-parent", str(os.getpid())]
    temp_config = None
    if isinstance(config, dict):
        import yaml

        # Overrides given as a dict travel as a YAML file, checked by the child like any other.
        with tempfile.NamedTemporaryFile(
            "w", prefix="headroom-sim-", suffix=".yaml", delete=False
        ) as f:
            yaml.safe_dump(config, f)
        temp_config = config = f.name
    if config is not None:
        try:
            resolve(scenario, os.fspath(config))  # a bad config fails here, in one line
        except SimConfigError:
            if temp_config:
                Path(temp_config).unlink(missing_ok=True)
            raise
        cmd += ["--config", os.fspath(config)]
    log = tempfile.NamedTemporaryFile(prefix="headroom-sim-", suffix=".log", delete=False)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_ROOT), env.get("PYTHONPATH", "")) if p)
    extra: dict[str, object] = (
        {"process_group": 0} if sys.version_info >= (3, 11) else {"preexec_fn": os.setpgrp}
    )
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL, env=env, **extra
    )  # type: ignore[call-overload]
    log.close()
    deadline = time.monotonic() + timeout
    url = _read_ready(proc, timeout)
    if url is None or not _wait_health(url, deadline):
        SimHandle(proc, url or "", scenario, "").stop(timeout=5)
        tail = Path(log.name).read_text(errors="replace").strip().splitlines()[-1:] or ["no output"]
        for path in (log.name, temp_config):
            if path:
                Path(path).unlink(missing_ok=True)
        raise SimStartError(f"the simulator did not start: {tail[0]}")
    return SimHandle(proc, url, scenario, log.name, temp_config)
