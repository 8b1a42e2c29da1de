"""`headroom agent` watching a real vLLM, scraped by a real Prometheus (Debian's package)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from proc_support import stop
from vllm_load import Load
from vllm_support import ROOT, SEQ_CAP, serve

pytestmark = [pytest.mark.vllm, pytest.mark.prometheus, pytest.mark.timeout(900)]


def _get_json(url: str, timeout: float = 10.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return json.loads(resp.read())


def _wait_for(
    what: str,
    check: Callable[[], Any],
    timeout: float,
    proc: subprocess.Popen | None = None,
    log: Path | None = None,
) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            out = log.read_text(errors="replace")[-2000:] if log else ""
            raise AssertionError(f"{what}: process exited {proc.returncode}: {out}")
        try:
            last = check()
            if last:
                return last
        except OSError as exc:
            last = exc
        time.sleep(0.5)
    raise AssertionError(f"{what}: not within {timeout:.0f} s (last: {last!r})")


@contextmanager
def _running(argv: list[str], port: int, ready: str, log: Path, **popen: Any) -> Iterator[str]:
    """argv started, its output to log; yields its URL once URL+ready answers 200."""
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, **popen)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_for(f"{log.stem} {ready}", lambda: _status(url + ready) == 200, 60, proc, log)
        yield url
    finally:
        stop(proc, grace=15)


@pytest.fixture
def agent(seq_cap_server: Any, tmp_path: Path) -> Iterator[str]:
    port = serve.free_port()
    # A short window so the verdict follows a short load; sampling every 0.25 s gives it 20
    # readings, so one odd reading between engine steps does not decide it.
    argv = [sys.executable, "-m", "headroom", "agent", "--listen", f"127.0.0.1:{port}",
            "--vllm", seq_cap_server.url, "--no-nvml", "--interval", "0.25", "--window", "5"]  # fmt: skip
    with _running(argv, port, "/healthz", tmp_path / "agent.log", cwd=ROOT) as url:
        yield url


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.fixture
def prometheus(agent: str, tmp_path: Path) -> Iterator[str]:
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("no prometheus binary (apt-get install prometheus; .ci/run installs it)")
    port = serve.free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
        "scrape_configs:\n  - job_name: headroom\n    static_configs:\n"
        f"      - targets: ['{agent.removeprefix('http://')}']\n"
    )
    argv = [binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"]  # fmt: skip
    with _running(argv, port, "/-/ready", tmp_path / "prometheus.log") as url:
        yield url


def _top_is(report: dict[str, Any], cause: str) -> dict[str, Any] | None:
    verdicts = report.get("verdicts") or []
    return report if verdicts and verdicts[0]["cause"] == cause else None


def _query(prom: str, expr: str) -> list[dict[str, Any]]:
    body = _get_json(f"{prom}/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
    assert body["status"] == "success", body
    return body["data"]["result"]


def _value(prom: str, expr: str) -> float | None:
    result = _query(prom, expr)
    return float(result[0]["value"][1]) if result else None


def test_agent_exports_engine_series_and_seq_cap_to_prometheus(
    seq_cap_server: Any, agent: str, prometheus: str
) -> None:
    # Idle first: Prometheus has the engine's series from the real server, at zero.
    running = _wait_for(
        "idle engine series in Prometheus",
        lambda: _query(prometheus, "headroom_engine_requests_running"),
        60,
    )
    assert float(running[0]["value"][1]) == 0
    assert running[0]["metric"].get("model_name") == "tiny-llama", running

    with Load(seq_cap_server.url, concurrency=3 * SEQ_CAP, max_tokens=200) as load:
        # The agent's verdict settles after two windows agree (hysteresis): wait for it.
        snapshot = _wait_for(
            "the agent's top verdict to be seq-cap",
            lambda: _top_is(_get_json(agent + "/api/v1/snapshot"), "seq-cap"),
            45,
        )
        time.sleep(2)  # a couple of Prometheus scrapes of the settled state
        seq_cap = 'max_over_time(headroom_diagnosis{cause="seq-cap"}[10s]) == 1'
        verdict_series = _query(prometheus, seq_cap)
        peak_running = _value(
            prometheus, "max_over_time(headroom_engine_requests_running_max[20s])"
        )
        peak_waiting = _value(
            prometheus, "max_over_time(headroom_engine_requests_waiting_max[20s])"
        )
        cap = _value(prometheus, 'max_over_time(headroom_engine_seq_cap{origin="reported"}[20s])')
    assert load.stats.errors == []

    assert verdict_series, "Prometheus never saw headroom_diagnosis{cause='seq-cap'} == 1"
    assert "tiny-llama" in verdict_series[0]["metric"]["scope"]
    assert peak_running == SEQ_CAP
    assert peak_waiting is not None and peak_waiting >= SEQ_CAP
    # vLLM exports no max_num_seqs: the agent reads it from the local server's command line.
    assert cap == SEQ_CAP
    # The agent's own API tells the same story.
    assert snapshot["engines"][0]["analysis"]["seq_cap"] == SEQ_CAP
    assert snapshot["engines"][0]["analysis"]["seq_cap_origin"] == "reported"
    assert snapshot["engines"][0]["analysis"]["seq_cap_reported_by"] == "cmdline"
    # No GPU on this box: GPU series are absent rather than exported as zeros.
    assert _query(prometheus, "headroom_gpu_utilization_ratio") == []
