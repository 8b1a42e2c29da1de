"""The simulator's HTTP face, through its real subprocess: OpenAI API, vLLM /metrics, dcgm /gpu/metrics."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from simulator import SimConfigError, SimHandle, start_sim

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
MODEL = "llama-3.1-8b"


@pytest.fixture(scope="module")
def sim() -> Iterator[SimHandle]:
    # A dict of overrides travels to the child as a config file.
    with start_sim(
        scenario="idle", load=False, config={"engine": {"max_model_len": 4096}}
    ) as handle:
        yield handle


@pytest.fixture(scope="module")
def client(sim: SimHandle) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=sim.url + "/v1", api_key="unused", timeout=30, max_retries=0) as c:
        yield c


def families(text: str) -> dict[str, tuple[str, set[tuple[str, frozenset[str]]]]]:
    out = {}
    for fam in text_string_to_metric_families(text):
        out[fam.name] = (fam.type, {(s.name, frozenset(s.labels)) for s in fam.samples})
    return out


def test_completion_not_streamed_gives_exactly_max_tokens(client: openai.OpenAI) -> None:
    resp = client.completions.create(
        model=MODEL, prompt="one two three four", max_tokens=7, extra_body={"ignore_eos": True}
    )
    assert resp.choices[0].finish_reason == "length"
    assert len(resp.choices[0].text.split()) == 7
    assert (resp.usage.prompt_tokens, resp.usage.completion_tokens) == (4, 7)


def test_completion_streamed_sends_one_event_per_token_and_usage(client: openai.OpenAI) -> None:
    stream = client.completions.create(
        model=MODEL,
        prompt="hello world",
        max_tokens=12,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )
    chunks = list(stream)
    texts = [c.choices[0].text for c in chunks if c.choices]
    assert len(texts) == 12 and all(t.strip() for t in texts)
    assert chunks[-2].choices[0].finish_reason == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 12
    assert chunks[-1].usage.prompt_tokens == 2


def test_completion_streamed_without_usage_sends_none(client: openai.OpenAI) -> None:
    chunks = list(client.completions.create(model=MODEL, prompt="hi", max_tokens=3, stream=True))
    assert len(chunks) == 3
    assert all(c.usage is None for c in chunks)


def test_chat_not_streamed(client: openai.OpenAI) -> None:
    resp = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "say something"}], max_tokens=5
    )
    msg = resp.choices[0].message
    assert msg.role == "assistant" and len(msg.content.split()) == resp.usage.completion_tokens
    assert resp.usage.completion_tokens <= 5


def test_chat_streamed(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "say something"}],
        max_completion_tokens=9,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    words = [c.choices[0].delta.content for c in chunks[1:] if c.choices]
    assert len(words) == 9
    assert chunks[-1].usage.completion_tokens == 9


def test_models_and_health(sim: SimHandle, client: openai.OpenAI) -> None:
    assert [m.id for m in client.models.list()] == [MODEL]
    assert httpx.get(sim.url + "/v1/models").json()["data"][0]["max_model_len"] == 4096
    assert httpx.get(sim.url + "/health").status_code == 200


@pytest.mark.parametrize(
    ("path", "body", "status", "param"),
    [
        ("/v1/completions", {"model": MODEL}, 400, "prompt"),
        ("/v1/completions", {"model": MODEL, "prompt": "hi", "max_tokens": 0}, 400, "max_tokens"),
        ("/v1/completions", {"model": MODEL, "prompt": "hi", "max_tokens": -3}, 400, "max_tokens"),
        ("/v1/completions", {"model": MODEL, "prompt": "a b c", "max_tokens": 4094}, 400, "max_tokens"),
        ("/v1/completions", {"model": MODEL, "prompt": "hi", "stream_options": {"include_usage": True}}, 400, "stream_options"),
        ("/v1/completions", {"model": "no-such-model", "prompt": "hi"}, 404, "model"),
        ("/v1/chat/completions", {"model": MODEL}, 400, "messages"),
        ("/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "max_tokens": 0}, 400, "max_tokens"),
    ],
)  # fmt: skip
def test_bad_requests_are_refused_like_vllm(
    sim: SimHandle, path: str, body: dict, status: int, param: str
) -> None:
    resp = httpx.post(sim.url + path, json=body)
    assert resp.status_code == status
    err = resp.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["code"] == status and err["param"] == param and err["message"]
    assert err["type"] == ("BadRequestError" if status == 400 else "NotFoundError")


def test_bad_request_raises_in_the_openai_client(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError, match="maximum context length"):
        client.completions.create(model=MODEL, prompt="a b c", max_tokens=5000)


def test_invalid_json_is_a_400(sim: SimHandle) -> None:
    resp = httpx.post(
        sim.url + "/v1/completions",
        content=b"{not json",
        headers={"Content-Type": "application/json"},
    )
    assert resp.status_code == 400 and resp.json()["error"]["type"] == "BadRequestError"


def test_metrics_match_vllm_families_types_and_labels(
    sim: SimHandle, client: openai.OpenAI
) -> None:
    client.completions.create(model=MODEL, prompt="warm up", max_tokens=4)
    ours = families(httpx.get(sim.metrics_url).text)
    theirs = families((FIXTURES / "vllm-0.32.0-cpu-metrics-under-load.txt").read_text())
    required = {
        "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:num_requests_waiting_by_reason",
        "vllm:kv_cache_usage_perc", "vllm:num_preemptions", "vllm:prompt_tokens", "vllm:generation_tokens",
        "vllm:request_success", "vllm:iteration_tokens_total", "vllm:time_to_first_token_seconds",
        "vllm:inter_token_latency_seconds", "vllm:e2e_request_latency_seconds",
        "vllm:request_queue_time_seconds", "vllm:request_prefill_time_seconds",
        "vllm:request_decode_time_seconds", "vllm:request_num_preemptions",
        "vllm:estimated_flops_per_gpu", "vllm:estimated_read_bytes_per_gpu",
        "vllm:estimated_write_bytes_per_gpu", "vllm:cache_config_info",
    }  # fmt: skip
    assert required <= set(ours)
    for name, (kind, samples) in ours.items():
        assert name in theirs, f"{name} is not a vLLM family"
        assert kind == theirs[name][0], name
        assert samples == theirs[name][1], name


def test_metrics_count_what_was_served(sim: SimHandle, client: openai.OpenAI) -> None:
    def value(text: str, name: str) -> float:
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                if s.name == name:
                    return s.value
        raise AssertionError(name)

    before = httpx.get(sim.metrics_url).text
    client.completions.create(
        model=MODEL, prompt="a b c d e", max_tokens=20, extra_body={"ignore_eos": True}
    )
    after = httpx.get(sim.metrics_url).text
    for name, delta in (
        ("vllm:generation_tokens_total", 20),
        ("vllm:prompt_tokens_total", 5),
        ("vllm:e2e_request_latency_seconds_count", 1),
        ("vllm:inter_token_latency_seconds_count", 19),
    ):
        assert value(after, name) - value(before, name) == delta, name
    assert value(after, "vllm:num_requests_running") == 0


def test_gpu_metrics_are_dcgm_exporter_format(sim: SimHandle) -> None:
    fams = {f.name: f for f in text_string_to_metric_families(httpx.get(sim.gpu_metrics_url).text)}
    fixture = {
        f.name: f
        for f in text_string_to_metric_families(
            (FIXTURES / "dcgm-exporter-metrics-t4-prof-dcgm-issue191.txt").read_text()
        )
    }
    for name in (
        "DCGM_FI_PROF_SM_ACTIVE",
        "DCGM_FI_PROF_SM_OCCUPANCY",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    ):
        assert fams[name].type == fixture[name].type == "gauge"
        assert {"gpu", "UUID", "device", "modelName", "Hostname"} <= set(
            fixture[name].samples[0].labels
        )
    for name in (
        "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_SM_OCCUPANCY",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE",
    ):  # fmt: skip
        (sample,) = fams[name].samples
        assert {"gpu", "UUID", "device", "modelName", "Hostname"} <= set(sample.labels)
        assert sample.labels["modelName"] == "NVIDIA H100 80GB HBM3" and sample.labels["gpu"] == "0"
    util = fams["DCGM_FI_DEV_GPU_UTIL"].samples[0].value
    assert 0 <= util <= 100
    # The board's energy since the simulator started, a counter in mJ as the driver's.
    energy = fams["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"]
    assert energy.type == "counter" and energy.samples[0].value > 0
    for name in (
        "DCGM_FI_PROF_SM_ACTIVE",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "DCGM_FI_PROF_DRAM_ACTIVE",
    ):
        assert 0 <= fams[name].samples[0].value <= 1
    total = (
        fams["DCGM_FI_DEV_FB_USED"].samples[0].value + fams["DCGM_FI_DEV_FB_FREE"].samples[0].value
    )
    assert total == 80 * 1024


def test_a_bad_config_dict_is_refused_before_starting() -> None:
    with pytest.raises(SimConfigError, match="unknown key engine.max_num_seqz"):
        start_sim(scenario="idle", config={"engine": {"max_num_seqz": 4}})


def test_clients_that_leave_mid_stream_leave_no_traceback(sim: SimHandle) -> None:
    """A sweep's step ends with streams cut off: normal for a server, so its log stays quiet
    (it once printed an aiohttp traceback per stream) and the engine frees the slots."""
    import socket
    import time

    host, port = sim.url.removeprefix("http://").split(":")
    body = (
        b'{"model": "%s", "prompt": "hi", "max_tokens": 2000, "stream": true, "ignore_eos": true}'
    )
    for _ in range(8):
        s = socket.create_connection((host, int(port)))
        payload = body % MODEL.encode()
        s.sendall(
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(payload), payload)
        )
        assert s.recv(4096).startswith(b"HTTP/1.1 200")
        s.close()  # gone mid-stream
    deadline = time.monotonic() + 20
    running = None
    while time.monotonic() < deadline:
        text = httpx.get(sim.url + "/metrics", timeout=5).text
        running = next(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("vllm:num_requests_running{")
        )
        if running == 0:
            break
        time.sleep(0.2)
    assert running == 0
    log = Path(sim.log_path).read_text()
    assert "Traceback" not in log and "ClientConnectionResetError" not in log, log[-2000:]


def test_sigterm_ends_the_sim_at_once_with_a_request_still_queued() -> None:
    """The seq-cap box with its own load holds 24 requests waiting: one more, queued behind
    them, kept a stopped simulator alive for aiohttp's 60 s shutdown (a Ctrl-C that hung, a
    test that waited out its 15 s stop and then killed it)."""
    import json
    import socket
    import time
    from urllib.parse import urlsplit

    h = start_sim(scenario="seq-cap", load=True)
    u = urlsplit(h.url)
    body = json.dumps({"model": MODEL, "prompt": "hi", "max_tokens": 16, "stream": True})
    with socket.create_connection((u.hostname, u.port)) as conn:
        conn.sendall(
            "POST /v1/completions HTTP/1.1\r\nHost: sim\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n{body}".encode()
        )
        time.sleep(0.5)  # in the queue now: 24 wait ahead of it, seconds before its turn
        t0 = time.monotonic()
        h.stop(timeout=20)  # SIGTERM; SIGKILL after 20 s
        took = time.monotonic() - t0
    assert not h.running
    assert took < 5, f"the simulator took {took:.1f} s to stop (killed at 20 s)"
