"""The exposition fetcher and parser: only wanted families, never a crash on a bad page."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from monitor.core.errors import ConfigError, EndpointError
from monitor.sources.promtext import (
    Scraper,
    display_url,
    expand_names,
    metrics_url,
    parse,
    select_lines,
)

UNDER_LOAD = "vllm-0.32.0-cpu-metrics-under-load.txt"
FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def test_select_lines_keeps_wanted_families_with_their_suffixes_and_comments() -> None:
    text = (
        "# HELP a_seconds Latency.\n"
        "# TYPE a_seconds histogram\n"
        'a_seconds_bucket{le="1.0"} 2.0\n'
        'a_seconds_bucket{le="+Inf"} 3.0\n'
        "a_seconds_sum 4.5\n"
        "a_seconds_count 3.0\n"
        "# HELP a_seconds_created Latency.\n"
        "# TYPE a_seconds_created gauge\n"
        "a_seconds_created 1.7e9\n"
        "# TYPE b_total counter\n"
        "b_total 7\n"
        "ab_seconds_count 9\n"
    )
    kept = select_lines(text, expand_names(["a_seconds"]))
    assert kept.splitlines() == text.splitlines()[:6]


def test_filtered_parse_matches_the_full_parse_on_the_real_page(
    read_fixture: Callable[[str], str],
) -> None:
    text = read_fixture(UNDER_LOAD)
    wanted = {"vllm:num_requests_running", "vllm:time_to_first_token_seconds"}
    names = expand_names(wanted)
    full = [
        (s.name, s.labels, s.value)
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if s.name in names
    ]
    got = parse(text, names)
    assert got.skipped_lines == 0
    assert [(s.name, s.labels, s.value) for s in got.samples] == full
    assert len(full) > 20  # running + every TTFT bucket, sum and count


def test_a_garbled_line_is_skipped_and_the_rest_still_read() -> None:
    text = 'm{engine="0"} 1\nm{engine="1" 2\nm{engine="2"} 3\nm{engine="3"} not-a-number\n'
    got = parse(text)
    assert [(s.labels["engine"], s.value) for s in got.samples] == [("0", 1.0), ("2", 3.0)]
    assert got.skipped_lines == 2


@FUZZ
@given(st.text())
def test_parse_never_raises_on_any_text(text: str) -> None:
    got = parse(text)
    assert got.skipped_lines >= 0
    got = parse(text, expand_names(["m", "vllm:num_requests_running"]))
    assert all(s.name in expand_names(["m", "vllm:num_requests_running"]) for s in got.samples)


_NAME = st.from_regex(r"[a-zA-Z_:][a-zA-Z0-9_:]{0,12}", fullmatch=True)
_LABEL = st.from_regex(r"[a-zA-Z_][a-zA-Z0-9_]{0,8}", fullmatch=True).filter(
    lambda s: not s.startswith("__")
)
_VALUE = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r"), max_size=12
)
_NUMBER = st.floats(allow_nan=False, allow_infinity=False, width=64)


def _escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


@FUZZ
@given(
    st.lists(
        st.tuples(_NAME, st.dictionaries(_LABEL, _VALUE, max_size=3), _NUMBER),
        max_size=8,
        unique_by=lambda t: (t[0], tuple(sorted(t[1].items()))),
    )
)
def test_well_formed_samples_round_trip(samples: list[tuple[str, dict[str, str], float]]) -> None:
    lines = []
    for name, labels, value in samples:
        inner = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
        lines.append(f"{name}{{{inner}}} {value!r}" if labels else f"{name} {value!r}")
    got = parse("\n".join(lines) + "\n")
    assert got.skipped_lines == 0
    assert [(s.name, s.labels, s.value) for s in got.samples] == samples


_LINE = st.one_of(
    st.builds(
        lambda n, v: f"{n} {v}", _NAME, st.sampled_from(["1", "NaN", "+Inf", "x", "", "1 2"])
    ),
    st.builds(lambda n, body: f"{n}{{{body}}} 1", _NAME, st.text(max_size=20)),
    st.builds(
        lambda n, t: f"# TYPE {n} {t}", _NAME, st.sampled_from(["counter", "histogram", "x"])
    ),
    st.text(max_size=30),
)


@FUZZ
@given(st.lists(_LINE, max_size=12))
def test_parse_of_exposition_like_garbage_never_raises(lines: list[str]) -> None:
    got = parse("\n".join(lines))
    for s in got.samples:
        assert isinstance(s.value, float)


def test_metrics_url_normalises_a_base_url_and_keeps_a_given_path() -> None:
    assert metrics_url("http://127.0.0.1:8000", "vLLM") == "http://127.0.0.1:8000/metrics"
    assert metrics_url("http://127.0.0.1:8000/", "vLLM") == "http://127.0.0.1:8000/metrics"
    assert metrics_url("127.0.0.1:8000", "vLLM") == "http://127.0.0.1:8000/metrics"
    assert metrics_url("http://h:9400/metrics", "x") == "http://h:9400/metrics"
    assert metrics_url("https://h/custom/path", "x") == "https://h/custom/path"


@pytest.mark.parametrize("bad", ["", "ftp://h/metrics", "http://h:notaport", "http://"])
def test_metrics_url_rejects_what_cannot_be_scraped(bad: str) -> None:
    with pytest.raises(ConfigError, match="URL"):
        metrics_url(bad, "vLLM")


def test_credentials_never_appear_in_messages(http_server) -> None:
    assert display_url("http://user:s3cret@h:8000/metrics") == "http://h:8000/metrics"
    port = http_server.port
    http_server.stop()  # nothing listens there now
    with Scraper(f"http://user:s3cret@127.0.0.1:{port}/metrics", 0.5) as scraper:
        with pytest.raises(EndpointError) as err:
            scraper.get()
    assert "s3cret" not in str(err.value)
    assert "connection refused" in str(err.value)


def test_a_dropped_keep_alive_connection_is_retried_once(http_server) -> None:
    http_server.set("/metrics", "m 1\n")
    with Scraper(http_server.url + "/metrics", 2.0) as scraper:
        assert scraper.get() == "m 1\n"
        http_server.routes["/metrics"].drop = 1
        assert scraper.get() == "m 1\n"
        assert len(http_server.hits) == 3
        http_server.routes["/metrics"].drop = 2
        with pytest.raises(EndpointError, match="closed the connection"):
            scraper.get()


def test_credentials_in_the_url_are_sent_as_basic_auth(http_server) -> None:
    http_server.set("/metrics", "m 1\n")
    port = http_server.port
    with Scraper(f"http://us%40er:p%3Ass@127.0.0.1:{port}/metrics", 2.0) as scraper:
        assert scraper.get() == "m 1\n"
    # "us@er:p:ss", percent-decoded, base64-encoded
    assert http_server.authorizations == ["Basic dXNAZXI6cDpzcw=="]


def test_a_page_in_another_charset_is_decoded_by_it(http_server) -> None:
    http_server.set("/metrics", "m{l=\"\u00e9\"} 1\n".encode("latin-1"),
                    content_type="text/plain; version=0.0.4; charset=iso-8859-1")  # fmt: skip
    with Scraper(http_server.url + "/metrics", 2.0) as scraper:
        assert scraper.get() == 'm{l="\u00e9"} 1\n'


def test_nan_values_survive_parsing_for_the_caller_to_judge() -> None:
    (s,) = parse("m NaN\n").samples
    assert math.isnan(s.value)
