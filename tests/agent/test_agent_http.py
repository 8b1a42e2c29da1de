"""The agent's HTTP face: /metrics, /healthz, /api/v1/snapshot, auth and TLS."""

from __future__ import annotations

import http.client
import shutil
import ssl
import subprocess
import threading
from pathlib import Path

import bcrypt
import httpx
import pytest
from agent_support import (
    Endpoint,
    FakeEngineSource,
    FakeGpuSource,
    get,
    make_config,
    wait_until,
)
from prometheus_client.parser import text_string_to_metric_families

import monitor.serve.agent
from monitor.core.errors import ConfigError
from monitor.serve.agent import Agent
from monitor.serve.config import AgentConfig
from monitor.sources.vllm import VllmSource


def samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def test_metrics_health_and_snapshot(start_agent) -> None:
    gpu, engine = FakeGpuSource(util=0.6, sm_active=0.45), FakeEngineSource(running=4, waiting=0)
    agent = start_agent([gpu, engine])
    wait_until(lambda: get(agent.url + "/healthz").status_code == 200)
    wait_until(lambda: "headroom_engine_requests_per_second" in get(agent.url + "/metrics").text)
    r = get(agent.url + "/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    m = samples(r.text)
    ((labels, util),) = m["headroom_gpu_utilization_ratio"]
    assert labels == {"gpu": "0", "uuid": "GPU-0000", "model": "NVIDIA H200", "source": "nvml"}
    assert util == pytest.approx(0.6)
    assert m["headroom_gpu_sm_active_ratio"][0][1] == pytest.approx(0.45)
    # Unsupported readings are absent, never 0.
    assert "headroom_gpu_tensor_active_ratio" not in m
    assert "headroom_gpu_dram_active_ratio" not in m
    ((elabels, running),) = m["headroom_engine_requests_running"]
    assert elabels == {"url": FakeEngineSource.url, "model_name": "tiny", "engine": "0"}
    assert running == 4
    # 2 requests per read; at ticks under a second the engine page is read once a second
    # (monitor.sources.paced), so 1 read/s.
    assert m["headroom_engine_requests_per_second"][0][1] == pytest.approx(2, rel=0.5)
    assert m["headroom_agent_ticks_total"][0][1] >= 2
    assert m["headroom_agent_tick_duration_seconds_count"][0][1] >= 2
    succeeded = {
        lab["source"] for lab, _ in m["headroom_agent_source_last_success_timestamp_seconds"]
    }
    assert succeeded == {"nvml", "vllm"}
    causes = {lab["cause"] for lab, _ in m["headroom_diagnosis"] if lab["scope"] == "box"}
    assert {"starved", "seq-cap", "idle"} <= causes

    health = get(agent.url + "/healthz")
    assert health.json()["status"] == "ok"
    snap = get(agent.url + "/api/v1/snapshot")
    assert snap.status_code == 200
    body = snap.json()
    assert body["gpus"][0]["util"] == pytest.approx(0.6)
    assert body["engines"][0]["model_name"] == "tiny"
    assert isinstance(body["verdicts"], list)
    assert get(agent.url + "/nope").status_code == 404


def test_openmetrics_is_negotiated(start_agent) -> None:
    agent = start_agent([FakeGpuSource()])
    wait_until(lambda: get(agent.url + "/healthz").status_code == 200)
    r = get(
        agent.url + "/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"}
    )
    assert r.headers["content-type"].startswith("application/openmetrics-text")
    assert r.text.rstrip().endswith("# EOF")


def test_healthz_turns_503_when_sampling_stalls_and_recovers(start_agent) -> None:
    gpu = FakeGpuSource()
    agent = start_agent([gpu], stale_after=1.0)
    wait_until(lambda: get(agent.url + "/healthz").status_code == 200)
    gpu.block.set()  # the next read hangs: no more ticks
    r = wait_until(lambda: (x := get(agent.url + "/healthz")).status_code == 503 and x)
    assert r.json()["status"] == "stale"
    # The last report is still served while sampling is stuck.
    assert get(agent.url + "/metrics").status_code == 200
    gpu.block.clear()
    wait_until(lambda: get(agent.url + "/healthz").status_code == 200)


def test_healthz_is_503_before_the_first_tick() -> None:
    gpu = FakeGpuSource()
    agent = Agent(AgentConfig(listen="127.0.0.1:0", nvml=False), sources=[gpu])
    try:
        # Serve without sampling: the state a scraper sees in the first tick's fraction of a second.
        threading.Thread(target=agent.server.serve_forever, daemon=True).start()
        r = get(agent.url + "/healthz")
        assert r.status_code == 503 and r.json()["reason"] == "no tick yet"
        assert get(agent.url + "/api/v1/snapshot").status_code == 503
        agent.server.shutdown()
    finally:
        agent.stop()


def test_source_errors_are_counted_and_last_success_stops(start_agent) -> None:
    gpu = FakeGpuSource()
    agent = start_agent([gpu])
    wait_until(lambda: "headroom_gpu_utilization_ratio" in get(agent.url + "/metrics").text)

    def last_success() -> float:
        m = samples(get(agent.url + "/metrics").text)
        return m["headroom_agent_source_last_success_timestamp_seconds"][0][1]

    gpu.fail = "NVMLError_GpuIsLost: GPU is lost"
    wait_until(lambda: "headroom_agent_source_errors_total{" in get(agent.url + "/metrics").text)
    frozen = last_success()
    wait_until(
        lambda: (
            samples(get(agent.url + "/metrics").text)["headroom_agent_source_errors_total"][0][1]
            >= 3
        )
    )
    assert last_success() == frozen
    m = samples(get(agent.url + "/metrics").text)
    ((labels, _),) = m["headroom_agent_source_errors_total"]
    assert labels == {"source": "nvml", "target": "gpu:0"}
    gpu.fail = None
    wait_until(lambda: last_success() > frozen)


def _users_file(tmp_path: Path) -> Path:
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode()
    web = tmp_path / "web.yml"
    web.write_text(f"basic_auth_users:\n  prom: {hashed}\n")
    return web


def test_basic_auth_guards_metrics_and_snapshot_but_not_healthz(
    start_agent, tmp_path: Path
) -> None:
    agent = start_agent([FakeGpuSource()], web_config=str(_users_file(tmp_path)))
    wait_until(lambda: get(agent.url + "/healthz").status_code == 200)
    for path in ("/metrics", "/api/v1/snapshot"):
        r = get(agent.url + path)
        assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Basic")
        assert get(agent.url + path, auth=("prom", "wrong")).status_code == 401
        assert get(agent.url + path, auth=("nobody", "s3cret")).status_code == 401
        assert get(agent.url + path, auth=("prom", "s3cret")).status_code == 200


def test_web_config_with_a_plain_password_is_refused(tmp_path: Path) -> None:
    web = tmp_path / "web.yml"
    web.write_text("basic_auth_users:\n  prom: hunter2\n")
    with pytest.raises(ConfigError, match="bcrypt") as info:
        Agent(AgentConfig(listen="127.0.0.1:0", nvml=False, web_config=str(web)), sources=[])
    assert "hunter2" not in str(info.value)


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_tls_serves_https_and_refuses_plain_http(start_agent, tmp_path: Path) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    web = tmp_path / "web.yml"
    web.write_text("tls_server_config:\n  cert_file: cert.pem\n  key_file: key.pem\n")
    agent = start_agent([FakeGpuSource()], web_config=str(web))
    assert agent.url.startswith("https://")
    ctx = ssl.create_default_context(cafile=str(cert))
    wait_until(lambda: httpx.get(agent.url + "/healthz", verify=ctx, timeout=10).status_code == 200)
    r = httpx.get(agent.url + "/metrics", verify=ctx, timeout=10)
    assert r.status_code == 200 and "headroom_agent_ticks_total" in r.text
    plain = agent.url.replace("https://", "http://")
    with pytest.raises(httpx.HTTPError):
        httpx.get(plain + "/metrics", timeout=5)
    # A client that fails the handshake does not stop the server.
    assert httpx.get(agent.url + "/healthz", verify=ctx, timeout=10).status_code == 200


def test_listen_on_a_busy_port_is_one_line_error(start_agent) -> None:
    agent = start_agent([FakeGpuSource()])
    host, port = agent.address
    with pytest.raises(ConfigError, match=f"cannot listen on 127.0.0.1:{port}"):
        Agent(AgentConfig(listen=f"127.0.0.1:{port}", nvml=False), sources=[])


def test_a_stopped_agent_answers_no_kept_alive_scraper() -> None:
    # Prometheus keeps its connection open between scrapes: once the agent stops, that
    # connection must end too, not go on being answered with the last readings.
    agent = Agent(make_config(), sources=[FakeGpuSource()])
    agent.start()
    host, port = agent.address
    conn = http.client.HTTPConnection(host, port, timeout=10)
    try:
        for _ in range(2):
            conn.request("GET", "/healthz")
            conn.getresponse().read()
        agent.stop()
        with pytest.raises((http.client.HTTPException, OSError)):
            conn.request("GET", "/metrics")
            conn.getresponse().read()
    finally:
        conn.close()


def test_every_answer_holds_every_tick_read_before_it(start_agent, monkeypatch) -> None:
    # The agent makes its snapshots, engine pages, window and diagnosis a few ticks at a
    # time; each request makes those still waiting first. With the wait made endless, only
    # the requests make them: every answer must still hold the engine's latest page.
    monkeypatch.setattr(monitor.serve.agent, "DIGEST_EVERY_S", 3600.0)
    fixtures = Path(__file__).resolve().parent.parent / "fixtures"
    loaded = (fixtures / "vllm-0.32.0-cpu-metrics-under-load.txt").read_bytes()
    idle = (fixtures / "vllm-0.32.0-cpu-metrics-idle.txt").read_bytes()
    endpoint = Endpoint(loaded)
    try:
        agent = start_agent([FakeGpuSource(), VllmSource(endpoint.url)], interval=0.5)

        def running() -> float | None:
            m = samples(get(agent.url + "/metrics").text)
            found = m.get("headroom_engine_requests_running")
            return found[0][1] if found else None

        wait_until(lambda: running() == 4)
        endpoint.body = idle
        wait_until(lambda: running() == 0)
        body = get(agent.url + "/api/v1/snapshot").json()
        assert body["engines"][0]["running"] == 0
        health = get(agent.url + "/healthz").json()
        assert health["status"] == "ok" and health["last_tick_age_s"] < 5
    finally:
        endpoint.stop()


def test_ticks_further_apart_than_the_digest_are_made_at_once(start_agent) -> None:
    # At 6 s ticks nothing is gained by waiting for the next one: each tick's snapshot (and
    # what listens to it: the agent's stats, its log lines, the auto-profiler) comes at once.
    gpu = FakeGpuSource()
    agent = start_agent([gpu], interval=6.0, window=12.0)
    wait_until(lambda: gpu.reads >= 1, timeout=20)
    wait_until(lambda: agent.stats.last_tick_wall() is not None, timeout=3)


def _snapshot(*args: str) -> subprocess.CompletedProcess[str]:
    import sys

    return subprocess.run(
        [sys.executable, "-m", "headroom", "snapshot", *args],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_snapshot_remote_prints_the_agents_latest_report(start_agent) -> None:
    gpu, engine = FakeGpuSource(util=0.6, sm_active=0.45), FakeEngineSource(running=4, waiting=0)
    agent = start_agent([gpu, engine])
    wait_until(lambda: get(agent.url + "/api/v1/snapshot").status_code == 200)
    out = _snapshot("--remote", agent.url, "--json")
    assert out.returncode == 0, out.stderr
    report = __import__("json").loads(out.stdout)
    assert report["engines"][0]["running"] == pytest.approx(4)
    assert report["gpus"][0]["util"] == pytest.approx(0.6)
    # The table a user reads, from the agent's report, with its verdicts.
    text = _snapshot("--remote", agent.url.removeprefix("http://"))
    assert text.returncode == 0, text.stderr
    assert "tiny" in text.stdout and "4" in text.stdout


def test_snapshot_remote_of_an_agent_that_is_down_is_one_line() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = _snapshot("--remote", f"127.0.0.1:{port}", "--timeout", "1")
    assert out.returncode == 1
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and f"127.0.0.1:{port}/api/v1/snapshot" in lines[0]
    assert "Traceback" not in out.stderr
