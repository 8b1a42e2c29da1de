"""A real `prometheus` on 127.0.0.1 over a given config (and optionally an existing TSDB),
for the tests and benchmarks that query one: started, waited for, and stopped."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import yaml
from proc_support import stop

from loadgen.tune import free_port

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
HAVE_PROMETHEUS = Path(PROMETHEUS).exists()


def ready(url: str) -> bool:
    try:
        return httpx.get(url + "/-/ready", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


@contextmanager
def run_prometheus(
    config: Mapping[str, Any],
    tmp: Path,
    data: Path | None = None,
    extra_args: tuple[str, ...] = (),
    timeout: float = 60.0,
) -> Iterator[str]:
    """Start Prometheus with ``config`` (a dict, written as YAML) and yield its base URL once
    ready. ``data`` is the TSDB directory (default tmp/data)."""
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(dict(config), sort_keys=False))
    port = free_port()
    log_path = tmp / "prometheus.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={tmp / 'prometheus.yml'}",
                f"--storage.tsdb.path={data or tmp / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                *extra_args,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while not ready(url):
            if proc.poll() is not None:
                raise RuntimeError(f"prometheus exited: {log_path.read_text()[-2000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"prometheus not ready within {timeout} s")
            time.sleep(0.25)
        yield url
    finally:
        stop(proc, grace=30)
