"""Each engine's page, as each release range writes it, read into headroom's fields.

The fixtures (tests/fixtures/engines/) are written from each engine's own metric
definitions, one per release range; each is served by a real HTTP server and read
the way `headroom snapshot` reads it. A field a page lacks must come back as None and
be listed in ``missing`` with the names looked for, never as 0.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from monitor.sources import metric_names as mn
from monitor.sources.samples import EngineSample
from monitor.sources.vllm import VllmSource, engines_from_text


@dataclass(frozen=True)
class Case:
    fixture: str
    flavour: str
    version: str
    # EngineSample attribute -> value, for every field the page gives.
    values: dict[str, float]
    # Histogram canonical name -> count.
    histograms: dict[str, float] = field(default_factory=dict)
    # The fields listed missing, each with whether names were looked for (False: the
    # engine exports none).
    missing: dict[str, bool] = field(default_factory=dict)
    model: str = ""
    engine: str = ""


CASES = [
    Case(
        "vllm-0.6-v0.txt",
        "vllm",
        "0.6-0.10 (V0)",
        {
            "running": 6,
            "waiting": 2,
            "kv_cache_usage": 0.42,
            "prefix_cache_hit_rate": 0.25,
            "preemptions_total": 3,
            "prompt_tokens_total": 51200,
            "generation_tokens_total": 12800,
            "request_success_total": 100,  # summed over finished_reason
        },
        {
            "time_to_first_token_seconds": 100,
            "inter_token_latency_seconds": 12700,  # time_per_output_token_seconds in V0
            "e2e_request_latency_seconds": 100,
            "iteration_tokens_total": 2200,
        },
        {"queue_time": True},
        model="llama-3-8b",
    ),
    Case(
        "vllm-0.8-v1.txt",
        "vllm",
        "0.8-0.10.1 (V1)",
        {
            "running": 4,
            "waiting": 1,
            "kv_cache_usage": 0.55,  # still gpu_cache_usage_perc before 0.10.2
            "prefix_cache_queries_total": 8000,
            "prefix_cache_hits_total": 2000,
            "preemptions_total": 0,
            "request_success_total": 32,
        },
        {
            "time_to_first_token_seconds": 32,
            "inter_token_latency_seconds": 3968,
            "request_queue_time_seconds": 32,
        },
        {"step_tokens": True},
        model="qwen2.5-7b",
        engine="0",
    ),
    Case(
        "sglang-0.4.7.txt",
        "sglang",
        "0.4.7+",
        {
            "running": 12,
            "waiting": 4,
            "kv_cache_usage": 0.95,
            "prefix_cache_hit_rate": 0.61,
            "preemptions_total": 17,  # retractions
            "prompt_tokens_total": 96000,
            "generation_tokens_total": 24000,
            "request_success_total": 120,
        },
        {
            "time_to_first_token_seconds": 120,
            "inter_token_latency_seconds": 23880,
            "e2e_request_latency_seconds": 120,
            "request_queue_time_seconds": 120,
        },
        {"step_tokens": False},
        model="qwen3-8b",
        engine="tp_rank=0,pp_rank=0",
    ),
    Case(
        "sglang-0.3.txt",
        "sglang",
        "0.3-0.4.6",
        {"running": 3, "waiting": 0, "kv_cache_usage": 0.02, "generation_tokens_total": 1500},
        {"inter_token_latency_seconds": 1489},
        {"preemptions": False, "queue_time": False, "step_tokens": False},
        model="llama-3.1-8b",
    ),
    Case(
        "tgi-2.4.txt",
        "tgi",
        "1.0-3.x",
        {
            "running": 9,
            "waiting": 7,
            "request_success_total": 50,
            "prompt_tokens_total": 21000,  # the input-length histogram's sum
            "generation_tokens_total": 9600,
        },
        {
            "e2e_request_latency_seconds": 50,
            "request_queue_time_seconds": 50,
            "request_time_per_output_token_seconds": 50,
        },
        {
            "kv_cache_usage": False,
            "preemptions": False,
            "ttft": False,
            "prefix_cache_hits": False,
            "step_tokens": False,
        },
    ),
    Case(
        "trtllm-1.2.txt",
        "trtllm",
        "1.2+",
        {
            "running": 64,
            "waiting": 21,
            "kv_cache_usage": 0.5,
            "prefix_cache_hit_rate": 0.12,
            "prompt_tokens_total": 240000,
            "generation_tokens_total": 61440,
            "request_success_total": 240,
        },
        {"time_to_first_token_seconds": 240, "inter_token_latency_seconds": 240},
        {"preemptions": False, "step_tokens": False},
        model="llama-3.1-8b",
    ),
    Case(
        "trtllm-1.0.txt",
        "trtllm",
        "1.0-1.1",
        {"request_success_total": 12},
        {"e2e_request_latency_seconds": 12, "request_queue_time_seconds": 12},
        {
            "running": False,
            "waiting": False,
            "kv_cache_usage": False,
            "prompt_tokens": False,
            "generation_tokens": False,
        },
        model="mistral-7b",
    ),
    Case(
        "triton-trtllm-24.08.txt",
        "triton-trtllm",
        "23.10+",
        {"running": 30, "waiting": 6, "kv_cache_usage": 0.952148, "seq_cap_reported": 64},
        {},
        {"ttft": False, "itl": False, "prompt_tokens": False, "preemptions": False},
        model="tensorrt_llm",
        engine="1",
    ),
    Case(
        "triton-trtllm-23.10.txt",
        "triton-trtllm",
        "23.10+",
        # KV from used / max blocks, before the fraction series existed.
        {"running": 16, "waiting": 2, "kv_cache_usage": 3900 / 4096, "seq_cap_reported": 64},
        {},
        {"ttft": False},
        model="tensorrt_llm",
        engine="1",
    ),
    Case(
        "llamacpp-b4000.txt",
        "llamacpp",
        "2024-mid-2025",
        {
            "running": 4,
            "waiting": 2,
            "kv_cache_usage": 0.37,
            "prompt_tokens_total": 5120,
            "generation_tokens_total": 2048,
        },
        {},
        {"ttft": False, "preemptions": False, "requests_completed": False},
    ),
    Case(
        "llamacpp-0.3.36-live.txt",
        "llamacpp",
        "mid-2025+ (no KV gauge)",
        {"running": 4, "waiting": 4, "prompt_tokens_total": 44, "generation_tokens_total": 0},
        {},
        {"kv_cache_usage": False, "ttft": False},
    ),
]


def _check(e: EngineSample, case: Case) -> None:
    assert (e.flavour, e.flavour_version) == (case.flavour, case.version)
    assert (e.model_name, e.engine) == (case.model, case.engine)
    for name, want in case.values.items():
        assert getattr(e, name) == pytest.approx(want), name
    for name, count in case.histograms.items():
        h = e.histogram(name)
        assert h is not None and h.count == count, name
    missing = dict(e.missing)
    for name, looked in case.missing.items():
        assert name in missing, name
        assert bool(missing[name]) == looked, (name, missing[name])
    # What is missing reads None, never 0.
    if "running" in missing:
        assert e.running is None
    if "kv_cache_usage" in missing:
        assert e.kv_cache_usage is None
    # And what is read is not listed missing.
    for name in case.values:
        assert name not in missing


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.fixture)
def test_each_release_range_is_found_and_mapped(
    case: Case, engine_page: Callable[[str], str]
) -> None:
    src = VllmSource(engine_page(case.fixture))
    try:
        reading = src.read()
    finally:
        src.close()
    assert reading.errors == ()
    (e,) = reading.engines
    _check(e, case)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.fixture)
def test_forcing_the_right_engine_reads_the_same(
    case: Case, read_fixture: Callable[[str], str]
) -> None:
    text = read_fixture(f"engines/{case.fixture}")
    found, _ = engines_from_text(text, "http://x/metrics")
    forced, _ = engines_from_text(text, "http://x/metrics", mn.flavour(case.flavour))
    assert forced == found


def test_tgi_lists_no_kv_gauge_as_exported_none(read_fixture: Callable[[str], str]) -> None:
    (e,) = engines_from_text(read_fixture("engines/tgi-2.4.txt"), "http://x/metrics")[0]
    assert dict(e.missing)["kv_cache_usage"] == ()


def test_a_stale_name_is_listed_with_the_names_looked_for(
    read_fixture: Callable[[str], str],
) -> None:
    # A vLLM 0.11 page without its KV gauge (renamed again, say): the names tried are shown.
    text = "\n".join(
        line
        for line in read_fixture("engines/vllm-0.11-dp2.txt").splitlines()
        if "kv_cache_usage_perc" not in line
    )
    engines, _ = engines_from_text(text, "http://x/metrics")
    assert all(e.kv_cache_usage is None for e in engines)
    looked = dict(engines[0].missing)["kv_cache_usage"]
    assert looked == ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")


def test_data_parallel_ranks_stay_apart(read_fixture: Callable[[str], str]) -> None:
    engines, _ = engines_from_text(read_fixture("engines/vllm-0.11-dp2.txt"), "http://x/metrics")
    assert [(e.engine, e.running, e.waiting) for e in engines] == [("0", 8, 5), ("1", 8, 3)]
    assert [e.kv_cache_usage for e in engines] == [0.31, 0.29]
    assert all(e.flavour_version == "0.10.2+ (V1)" for e in engines)


def test_trtllm_serve_is_found_at_its_prometheus_path(
    http_server, read_fixture: Callable[[str], str]
) -> None:
    # trtllm-serve's /metrics is a JSON list of iteration stats; Prometheus text lives at
    # /prometheus/metrics. A base URL finds it there, and stays.
    http_server.set("/metrics", '[{"iter": 1}]', content_type="application/json")
    http_server.set("/prometheus/metrics", read_fixture("engines/trtllm-1.2.txt"))
    src = VllmSource(http_server.url)
    try:
        (e,) = src.read().engines
        assert (e.flavour, e.running) == ("trtllm", 64)
        assert src.url == http_server.url + "/prometheus/metrics"
        src.read()
    finally:
        src.close()
    assert http_server.hits.count("/metrics") == 1


def test_forcing_trtllm_goes_to_its_path_first(
    http_server, read_fixture: Callable[[str], str]
) -> None:
    http_server.set("/prometheus/metrics", read_fixture("engines/trtllm-1.2.txt"))
    src = VllmSource(http_server.url, flavour="trtllm")
    try:
        (e,) = src.read().engines
    finally:
        src.close()
    assert e.running == 64
    # Its metrics path first; the engine's caps are asked at the server's root (vLLM's
    # /server_info, llama.cpp's /props), not there.
    metrics_hits = [h for h in http_server.hits if not h.startswith(("/server_info", "/props"))]
    assert metrics_hits == ["/prometheus/metrics"]


def test_every_table_names_only_its_own_prefix() -> None:
    for t in mn.TABLES:
        assert all(name.startswith(t.prefix) for name in t.metric_names()), t.label


def test_a_server_that_is_down_is_not_asked_twice_a_tick(http_server) -> None:
    # Slow at /metrics: the engine paths elsewhere are tried only for a server that answered.
    http_server.set("/metrics", "x 1\n", delay=1.0)
    src = VllmSource(http_server.url, timeout=0.3)
    try:
        (err,) = src.read().errors
    finally:
        src.close()
    assert err.message.endswith("did not answer within 0.3 s")
    assert "/prometheus/metrics" not in http_server.hits


def test_an_http_error_at_metrics_tries_the_engine_path(
    http_server, read_fixture: Callable[[str], str]
) -> None:
    http_server.set("/prometheus/metrics", read_fixture("engines/trtllm-1.0.txt"))
    src = VllmSource(http_server.url)  # /metrics answers 404 here
    try:
        (e,) = src.read().engines
    finally:
        src.close()
    assert (e.flavour, e.flavour_version) == ("trtllm", "1.0-1.1")
