"""vLLM's /metrics as a user sees it: the numbers of each engine, and one-line errors."""

from __future__ import annotations

import math
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monitor.core.errors import ConfigError, EndpointError
from monitor.sources.base import Reading, Source
from monitor.sources.metric_names import HISTOGRAMS
from monitor.sources.samples import EngineSample, Snapshot
from monitor.sources.vllm import VllmSource, engines_from_text
from monitor.window.full import compute_window
from monitor.window.stats import TTFT

UNDER_LOAD = "vllm-0.32.0-cpu-metrics-under-load.txt"
IDLE = "vllm-0.32.0-cpu-metrics-idle.txt"


def only_engine(reading: Reading) -> EngineSample:
    assert reading.errors == ()
    (engine,) = reading.engines
    return engine


def read_once(url: str, **kwargs: object) -> Reading:
    with closing(VllmSource(url, **kwargs)) as src:  # type: ignore[arg-type]
        return src.read()


def test_is_a_source_and_normalises_the_url() -> None:
    with closing(VllmSource("http://127.0.0.1:8000")) as src:
        assert isinstance(src, Source)
        assert src.name == "vllm"
        assert src.url == "http://127.0.0.1:8000/metrics"
        assert VllmSource("http://127.0.0.1:8000/metrics").url == src.url


def test_under_load_page_reads_running_and_waiting_by_reason(
    http_server, read_fixture: Callable[[str], str]
) -> None:
    http_server.set("/metrics", read_fixture(UNDER_LOAD))
    e = only_engine(read_once(http_server.url))
    assert (e.model_name, e.engine, e.flavour) == ("tiny-llama", "0", "vllm")
    assert e.url == http_server.url + "/metrics"
    assert (e.running, e.waiting) == (4.0, 8.0)
    assert (e.waiting_capacity, e.waiting_deferred) == (8.0, 0.0)
    assert e.kv_cache_usage == pytest.approx(0.000977, rel=1e-3)


def test_idle_page_reads_zero_running(http_server, read_fixture: Callable[[str], str]) -> None:
    http_server.set("/metrics", read_fixture(IDLE))
    e = only_engine(read_once(http_server.url + "/metrics"))
    assert (e.running, e.waiting, e.kv_cache_usage) == (0.0, 0.0, 0.0)


def test_counters_are_raw_and_summed_over_finished_reason(
    read_fixture: Callable[[str], str],
) -> None:
    (e,), skipped = engines_from_text(read_fixture(UNDER_LOAD), "http://h/metrics")
    assert skipped == 0
    # request_success_total is split by finished_reason: 8 requests ended by length.
    assert e.request_success_total == 8.0
    assert e.prompt_tokens_total == 78.0
    assert e.preemptions_total == 0.0
    # admission_rejections_total has no engine label: it still lands on engine 0.
    assert e.admission_rejections_total == 0.0
    assert e.estimated_flops_total == 0.0


def test_prefix_cache_counters_give_a_hit_rate_over_the_window(
    read_fixture: Callable[[str], str],
) -> None:
    page = read_fixture(UNDER_LOAD)
    (e,), _ = engines_from_text(page, "http://h/metrics")
    # The real page: 78 prompt tokens looked up, none found cached.
    assert (e.prefix_cache_queries_total, e.prefix_cache_hits_total) == (78.0, 0.0)
    later = page.replace(
        'vllm:prefix_cache_queries_total{engine="0",model_name="tiny-llama"} 78.0',
        'vllm:prefix_cache_queries_total{engine="0",model_name="tiny-llama"} 478.0',
    ).replace(
        'vllm:prefix_cache_hits_total{engine="0",model_name="tiny-llama"} 0.0',
        'vllm:prefix_cache_hits_total{engine="0",model_name="tiny-llama"} 300.0',
    )
    (e2,), _ = engines_from_text(later, "http://h/metrics")
    snaps = [Snapshot(t=0.0, wall=1e9, engines=(e,)), Snapshot(t=1.0, wall=1e9 + 1, engines=(e2,))]
    (w,) = compute_window(snaps).engines
    assert w.prefix_cache_hit_rate == pytest.approx(300 / 400)
    # Nothing looked up in a window: no rate rather than a 0% that reads as all misses.
    (w0,) = compute_window([snaps[1], Snapshot(t=2.0, wall=1e9 + 2, engines=(e2,))]).engines
    assert w0.prefix_cache_hit_rate is None


def test_every_histogram_is_cumulative_and_complete(read_fixture: Callable[[str], str]) -> None:
    (e,), _ = engines_from_text(read_fixture(UNDER_LOAD), "http://h/metrics")
    assert [name for name, _ in e.histograms] == list(HISTOGRAMS)
    for name, h in e.histograms:
        bounds = [le for le, _ in h.buckets]
        counts = [c for _, c in h.buckets]
        assert bounds == sorted(bounds) and math.isinf(bounds[-1]), name
        assert counts == sorted(counts), name  # cumulative
        assert counts[-1] == h.count, name
    ttft = e.histogram(TTFT)
    assert ttft is not None and ttft.count == 12.0
    assert ttft.sum == pytest.approx(1.5429, rel=1e-3)


def test_cache_config_keeps_its_labels_but_not_the_engine(
    read_fixture: Callable[[str], str],
) -> None:
    (e,), _ = engines_from_text(read_fixture(UNDER_LOAD), "http://h/metrics")
    assert e.cache_config_value("block_size") == "128"
    assert e.cache_config_value("num_gpu_blocks") == "4096"
    assert e.cache_config_value("engine") is None


TWO_ENGINES = """\
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="1",model_name="m"} 5.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 0.0
vllm:num_requests_waiting{engine="1",model_name="m"} 6.0
# TYPE vllm:num_requests_waiting_by_reason gauge
vllm:num_requests_waiting_by_reason{engine="1",model_name="m",reason="capacity"} 4.0
vllm:num_requests_waiting_by_reason{engine="1",model_name="m",reason="deferred"} 2.0
# TYPE vllm:admission_rejections_total counter
vllm:admission_rejections_total{model_name="m",reason="max_num_queued_reqs"} 2.0
vllm:admission_rejections_total{model_name="m",reason="max_num_queued_tokens"} 1.0
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="1",le="0.1",model_name="m"} 1.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="+Inf",model_name="m"} 4.0
vllm:time_to_first_token_seconds_sum{engine="1",model_name="m"} 2.5
vllm:time_to_first_token_seconds_count{engine="1",model_name="m"} 4.0
vllm:cache_config_info{block_size="16",engine="1"} 1.0
"""


def test_two_engines_in_one_exposition_stay_apart() -> None:
    (e0, e1), _ = engines_from_text(TWO_ENGINES, "http://h/metrics")
    assert (e0.engine, e0.running, e0.waiting) == ("0", 3.0, 0.0)
    assert (e1.engine, e1.running, e1.waiting) == ("1", 5.0, 6.0)
    assert (e1.waiting_capacity, e1.waiting_deferred) == (4.0, 2.0)
    assert e0.waiting_capacity is None  # not published for engine 0: unknown, not 0
    # A per-model counter is counted once, on the first engine.
    assert (e0.admission_rejections_total, e1.admission_rejections_total) == (3.0, None)
    assert e0.histogram(TTFT) is None
    assert e1.histogram(TTFT) is not None and e1.histogram(TTFT).count == 4.0
    assert (e0.cache_config, e1.cache_config_value("block_size")) == ((), "16")


def test_older_vllm_names_are_read_through_their_aliases() -> None:
    old = (
        'vllm:num_requests_running{model_name="m"} 2\n'
        'vllm:gpu_cache_usage_perc{model_name="m"} 0.75\n'
        'vllm:time_per_output_token_seconds_bucket{le="0.05",model_name="m"} 7\n'
        'vllm:time_per_output_token_seconds_bucket{le="+Inf",model_name="m"} 9\n'
        'vllm:time_per_output_token_seconds_sum{model_name="m"} 0.4\n'
        'vllm:time_per_output_token_seconds_count{model_name="m"} 9\n'
    )
    (e,), _ = engines_from_text(old, "http://h/metrics")
    assert (e.model_name, e.engine, e.running, e.kv_cache_usage) == ("m", "", 2.0, 0.75)
    itl = e.histogram("inter_token_latency_seconds")
    assert itl is not None and itl.count == 9.0
    assert e.waiting is None


SGLANG = """\
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{engine_type="unified",model_name="q",pp_rank="0",tp_rank="0"} 7.0
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{engine_type="unified",model_name="q",pp_rank="0",tp_rank="0"} 3.0
# TYPE sglang:token_usage gauge
sglang:token_usage{engine_type="unified",model_name="q",pp_rank="0",tp_rank="0"} 0.28
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{model_name="q"} 812.0
"""


def test_sglang_is_detected_and_mapped(http_server) -> None:
    http_server.set("/metrics", SGLANG)
    e = only_engine(read_once(http_server.url))
    assert e.flavour == "sglang"
    assert (e.model_name, e.running, e.waiting, e.kv_cache_usage) == ("q", 7.0, 3.0, 0.28)
    assert e.prompt_tokens_total == 812.0


def test_a_forced_flavour_that_is_not_served_is_an_error(http_server) -> None:
    http_server.set("/metrics", SGLANG)
    reading = read_once(http_server.url, flavour="vllm")
    assert reading.engines == ()
    assert "does not serve vLLM metrics (no vllm: families found)" in reading.errors[0].message


def test_an_unknown_flavour_is_a_config_error() -> None:
    # Ollama serves no Prometheus page at all: there is nothing to map.
    with pytest.raises(ConfigError, match="unknown engine 'ollama' \\(known: vllm, sglang, tgi"):
        VllmSource("http://127.0.0.1:8000", flavour="ollama")


def test_connection_refused_is_one_line(http_server) -> None:
    url = http_server.url
    http_server.stop()
    (err,) = read_once(url).errors
    assert err.source == "vllm"
    assert err.message == f"cannot connect to {url}/metrics: connection refused"


def test_a_slow_server_times_out(http_server, read_fixture: Callable[[str], str]) -> None:
    http_server.set("/metrics", read_fixture(IDLE), delay=3.0)
    t0 = time.monotonic()
    reading = read_once(http_server.url, timeout=0.3)
    assert time.monotonic() - t0 < 2.9  # gave up at the timeout, not at the answer
    assert reading.engines == ()
    assert reading.errors[0].message == f"{http_server.url}/metrics did not answer within 0.3 s"


def test_an_http_error_status_is_reported(http_server) -> None:
    http_server.set("/metrics", "boom", status=500)
    (err,) = read_once(http_server.url).errors
    assert err.message == f"{http_server.url}/metrics answered HTTP 500 Internal Server Error"


def test_a_page_that_is_not_vllm_metrics_says_so(http_server) -> None:
    http_server.set("/metrics", "<html><body>Hello</body></html>", content_type="text/html")
    (err,) = read_once(http_server.url).errors
    assert err.message == (
        f"{http_server.url}/metrics serves no serving engine's metrics that headroom knows "
        "(vLLM, SGLang, TGI, TensorRT-LLM, Triton TensorRT-LLM, llama.cpp)"
    )


def test_a_dropped_connection_costs_no_reading(
    http_server, read_fixture: Callable[[str], str]
) -> None:
    http_server.set("/metrics", read_fixture(IDLE))
    with closing(VllmSource(http_server.url)) as src:
        assert src.read().errors == ()
        http_server.routes["/metrics"].drop = 1  # the kept-alive connection is closed on us
        assert only_engine(src.read()).running == 0.0


def _counters_times(text: str, factor: float) -> str:
    """The page with its request counter and TTFT histogram times ``factor``: below 1, the page
    after a server restart (back near zero); above 1, the page later on."""
    out = []
    for line in text.splitlines():
        if line.startswith(("vllm:request_success_total", "vllm:time_to_first_token_seconds_")):
            name, value = line.rsplit(" ", 1)
            line = f"{name} {float(value) * factor}"
        out.append(line)
    return "\n".join(out) + "\n"


def _restarted(text: str) -> str:
    return _counters_times(text, 1 / 4)


def _grown(text: str) -> str:
    return _counters_times(text, 2)


def test_a_server_restart_gives_sane_rates_through_the_window(
    http_server, read_fixture: Callable[[str], str]
) -> None:
    before = read_fixture(UNDER_LOAD)
    pages = [before, _grown(before), _restarted(before)]
    src = VllmSource(http_server.url)
    snaps = []
    try:
        for i, page in enumerate(pages):
            http_server.set("/metrics", page)
            r = src.read()
            assert r.errors == ()
            snaps.append(Snapshot(t=float(i), wall=1e9 + i, engines=r.engines))
    finally:
        src.close()
    (w,) = compute_window(snaps).engines
    # 8 -> 16 (+8), then a restart to 2: Prometheus counts the 2 since the restart.
    assert w.requests_per_s == pytest.approx((8 + 2) / 2)
    ttft = w.histogram(TTFT)
    assert ttft is not None and ttft.count == pytest.approx(12 + 3)
    assert all(c >= 0 for _, c in ttft.buckets)
    assert w.ttft_p50_s is not None and w.ttft_p50_s >= 0


FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
_LINES = (Path(__file__).parent.parent / "fixtures" / UNDER_LOAD).read_text().splitlines()


_EDIT = st.tuples(
    st.integers(min_value=0, max_value=10_000),
    st.sampled_from(["cut", "drop", "garble", "dup", "nan"]),
    st.integers(min_value=0, max_value=200),
)


@FUZZ
@given(edits=st.lists(_EDIT, max_size=12))
def test_corrupted_real_pages_never_raise_out_of_the_parser(
    edits: list[tuple[int, str, int]],
) -> None:
    lines = list(_LINES)
    for where, how, at in edits:
        i = where % len(lines)
        if how == "cut":
            lines[i] = lines[i][: at % (len(lines[i]) + 1)]
        elif how == "drop":
            del lines[i]
        elif how == "garble":
            lines[i] = lines[i][:at] + '{"\\' + lines[i][at:]
        elif how == "dup":
            lines.insert(i, lines[i])
        else:
            lines[i] = lines[i].rsplit(" ", 1)[0] + " NaN"
    try:
        engines, skipped = engines_from_text("\n".join(lines), "http://h/metrics")
    except EndpointError:
        return
    assert skipped >= 0
    for e in engines:
        for _, h in e.histograms:
            assert math.isfinite(h.sum) and math.isfinite(h.count)


@FUZZ
@given(st.text(max_size=300))
def test_arbitrary_text_is_an_endpoint_error_or_engines(text: str) -> None:
    try:
        engines_from_text(text, "http://h/metrics")
    except EndpointError as exc:
        assert "\n" not in str(exc)


def test_a_garbled_line_costs_that_line_only(
    http_server, read_fixture: Callable[[str], str]
) -> None:
    lines = read_fixture(UNDER_LOAD).splitlines()
    i = next(k for k, line in enumerate(lines) if line.startswith("vllm:num_requests_running{"))
    lines[i] = lines[i].replace('engine="0"', 'engine="0')
    http_server.set("/metrics", "\n".join(lines) + "\n")
    reading = read_once(http_server.url)
    (e,) = reading.engines
    assert e.running is None  # the garbled series is unknown...
    assert e.waiting == 8.0  # ...the others are still read
    (err,) = reading.errors
    assert err.message == f"{http_server.url}/metrics: skipped 1 malformed line(s)"


def _advanced(page: str, by: float, model: str) -> str:
    """The page ``by`` later: every cumulative series grown, the model renamed."""
    out = []
    for line in page.splitlines():
        if line and not line.startswith("#"):
            prefix, _, number = line.rpartition(" ")
            if prefix.partition("{")[0].endswith(("_total", "_count", "_sum", "_bucket")):
                line = f"{prefix} {float(number) + by}"
        out.append(line.replace('model_name="tiny-llama"', f'model_name="{model}"'))
    return "\n".join(out) + "\n"


def test_pages_read_through_the_last_ones_layout_give_the_same_engines(
    read_fixture: Callable[[str], str],
) -> None:
    # A server repeats its series scrape after scrape: the source reads the next page
    # through the last one's layout, and must get what a fresh read gets, also across
    # a model renamed between pages and a series that appears.
    from monitor.sources.vllm import PageMemo

    page = read_fixture(UNDER_LOAD)
    memo = PageMemo()
    pages = [_advanced(page, 5.0 * i, "tiny-llama" if i < 4 else "other") for i in range(8)]
    pages.append(pages[-1] + 'vllm:num_requests_running{engine="1",model_name="other"} 3.0\n')
    pages.append(pages[-1].replace("} 3.0\n", "} 4.0\n"))
    for text in pages:
        assert engines_from_text(text, "http://h/metrics", None, memo) == engines_from_text(
            text, "http://h/metrics"
        )
    (e0, e1), _ = engines_from_text(pages[-1], "http://h/metrics", None, memo)
    assert (e0.model_name, e1.engine, e1.running) == ("other", "1", 4.0)


def test_credentials_in_the_engine_url_never_reach_a_reading_or_the_output(
    http_server, read_fixture: Callable[[str], str]
) -> None:
    # The engine's URL labels every series the agent exports and every line printed.
    http_server.set("/metrics", read_fixture(UNDER_LOAD))
    port = http_server.port
    url = f"http://ops:s3cret@127.0.0.1:{port}"
    (e,) = read_once(url).engines
    assert e.url == f"http://127.0.0.1:{port}/metrics"
    assert http_server.authorizations[-1] is not None  # still sent, as basic auth
    for args in ((), ("--json",)):
        done = subprocess.run(
            [sys.executable, "-m", "headroom", "snapshot", "--no-nvml", "--no-host",
             "--window", "1", "--vllm", url, *args],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert "127.0.0.1" in done.stdout
        assert "s3cret" not in done.stdout + done.stderr


def test_a_page_read_later_is_the_page_as_it_was_fetched(
    http_server, read_fixture: Callable[[str], str]
) -> None:
    # The agent fetches the page on the tick and parses it a few ticks later: the reading
    # must be of the page fetched, not of what the server says by then.
    page = read_fixture(UNDER_LOAD)
    http_server.set("/metrics", page)
    with closing(VllmSource(http_server.url)) as src:
        first = src.read()  # finds the engine's page (tried whole while it might be elsewhere)
        later = src.read_later()
        http_server.set("/metrics", _grown(page))
        grown = src.read_later()
        http_server.set("/metrics", "not metrics at all\n")
        garbage = src.read_later()
        http_server.stop()
        down = src.read_later()
        assert later() == first
        made = only_engine(grown())
        assert made == only_engine(read_once_text(_grown(page), http_server.url + "/metrics"))
        assert made.request_success_total == 2 * only_engine(first).request_success_total
        (err,) = garbage().errors
        assert "metrics" in err.message and not garbage().engines
        (err,) = down().errors
        assert err.source == "vllm" and not down().engines


def read_once_text(text: str, url: str) -> Reading:
    engines, skipped = engines_from_text(text, url)
    assert skipped == 0
    return Reading(engines=engines)
