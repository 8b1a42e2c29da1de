"""The fast path reads a page exactly as prometheus-client does, and hands it what it cannot.

Each comparison is against prometheus-client's own parser run on the same text
(narrowed by select_lines when names are given), the reading headroom used
before the fast path existed.
"""

from __future__ import annotations

import math
import random
import re
import threading
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from pathlib import Path
from wsgiref.simple_server import WSGIRequestHandler, make_server

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Gauge, make_wsgi_app
from prometheus_client.parser import text_string_to_metric_families

from monitor.sources import promtext
from monitor.sources.metric_names import all_metric_names
from monitor.sources.promtext import Scraper, expand_names, parse, select_lines

FIXTURES = (
    "vllm-0.32.0-cpu-metrics-idle.txt",
    "vllm-0.32.0-cpu-metrics-under-load.txt",
    "dcgm-exporter-metrics-t4-prof-dcgm-issue191.txt",
)
VLLM_NAMES = expand_names(all_metric_names())
DCGM_NAMES = expand_names(
    ["DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_DEV_GPU_UTIL"]
)
DIFF = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

Key = tuple[str, tuple[tuple[str, str], ...], str]


def _key(name: str, labels: dict[str, str], value: float) -> Key:
    # float.hex tells -0.0 from 0.0; every NaN reads as one value, as the parsers
    # both give float("nan") for any spelling.
    shown = "nan" if math.isnan(value) else value.hex()
    return (name, tuple(labels.items()), shown)


def reference(text: str, names: Collection[str] | None = None) -> list[Key]:
    """prometheus-client's reading; raises where it rejects the page."""
    if names is not None:
        text = select_lines(text, names)
    return [
        _key(s.name, dict(s.labels), float(s.value))
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    ]


def fast(text: str, names: Collection[str] | None = None) -> list[Key]:
    got = parse(text, names)
    assert got.skipped_lines == 0
    return [_key(s.name, s.labels, s.value) for s in got.samples]


@contextmanager
def slow_calls() -> Iterator[list[str]]:
    """Record every text the fast path hands to prometheus-client."""
    seen: list[str] = []
    real = promtext.text_string_to_metric_families

    def spy(text: str):  # type: ignore[no-untyped-def]
        seen.append(text)
        return real(text)

    promtext.text_string_to_metric_families = spy  # type: ignore[assignment]
    try:
        yield seen
    finally:
        promtext.text_string_to_metric_families = real  # type: ignore[assignment]


# --- the real pages ---------------------------------------------------------


@pytest.mark.parametrize("fixture", FIXTURES)
@pytest.mark.parametrize("names", [None, VLLM_NAMES, DCGM_NAMES], ids=["all", "vllm", "dcgm"])
def test_real_pages_read_the_same_without_prometheus_client(
    read_fixture: Callable[[str], str], fixture: str, names: frozenset[str] | None
) -> None:
    text = read_fixture(fixture)
    want = reference(text, names)
    with slow_calls() as seen:
        assert fast(text, names) == want
        assert fast(text, names) == want  # again, now with the series remembered
    assert seen == []
    if names is None or (names is DCGM_NAMES) == fixture.startswith("dcgm"):
        assert len(want) >= 4  # not a comparison of two empty lists


# --- generated pages --------------------------------------------------------

_METRIC = st.from_regex(r"[a-zA-Z_:][a-zA-Z0-9_:]{0,10}", fullmatch=True)
_LABEL_NAME = st.from_regex(r"[a-zA-Z_][a-zA-Z0-9_]{0,6}", fullmatch=True).filter(
    lambda s: not s.startswith("__") and s not in ("le", "quantile")
)
# Characters that trip a careless label reader: separators, quotes, escapes.
_PLAIN_CHARS = st.characters(
    blacklist_categories=("Cs",), blacklist_characters='\\"\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029'
)
_PLAIN_VALUE = st.text(_PLAIN_CHARS, max_size=8) | st.sampled_from(
    ["a,b", "x=y", "}", "{", " # ", "=", ",", " ", "le", "+Inf"]
)
_ESCAPED_VALUE = st.text(
    st.sampled_from(["a", " ", ",", "}", "\\", '"', "\n"]), min_size=1, max_size=6
).filter(lambda v: any(c in v for c in '\\"\n'))


def _exposition_float(v: float) -> str:
    # How exporters spell them (Go's and prometheus-client's writers).
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(v)


_NUMBER = st.one_of(
    st.floats(width=64).map(_exposition_float),
    st.integers(-(10**20), 10**20).map(str),
    st.sampled_from(
        ["+Inf", "-Inf", "NaN", "0", "-0", "+0", "-0.0", "1e3", "1E-3", ".5", "5.", "+7", "007"]
    ),
    st.integers(280, 308).map(lambda n: "9" * n),  # long integers, still in float range
)


def _escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


@st.composite
def _labels(draw: st.DrawFn, escapes: bool) -> str:
    names = draw(st.lists(_LABEL_NAME, max_size=3, unique=True))
    values = st.one_of(_PLAIN_VALUE, _ESCAPED_VALUE) if escapes else _PLAIN_VALUE
    return ",".join(f'{n}="{_escape(draw(values))}"' for n in names)


def _line(name: str, labels: str, number: str) -> str:
    return f"{name}{{{labels}}} {number}" if labels else f"{name} {number}"


@st.composite
def _family(draw: st.DrawFn, escapes: bool) -> list[str]:
    base = draw(_METRIC)
    typ = draw(st.sampled_from(["counter", "gauge", "histogram", "summary", "untyped", "info"]))
    if typ == "counter" and draw(st.booleans()):
        base += "_total"  # both spellings: prometheus-client renames only the one without
    lines = []
    if draw(st.booleans()):
        lines.append(f"# HELP {base} {draw(st.text(_PLAIN_CHARS, max_size=12))}".rstrip())
    if typ != "untyped" or draw(st.booleans()):
        lines.append(f"# TYPE {base} {typ}")
    for _ in range(draw(st.integers(0, 3))):
        labels = draw(_labels(escapes))
        sep = "," if labels else ""
        if typ == "histogram":
            bounds = sorted(draw(st.lists(st.floats(0, 1e6), max_size=4, unique=True)))
            for le in [*(repr(b) for b in bounds), "+Inf"]:
                lines.append(_line(base + "_bucket", f'{labels}{sep}le="{le}"', draw(_NUMBER)))
            lines.append(_line(base + "_sum", labels, draw(_NUMBER)))
            lines.append(_line(base + "_count", labels, draw(_NUMBER)))
        elif typ == "summary":
            for q in ("0.5", "0.99"):
                lines.append(_line(base, f'{labels}{sep}quantile="{q}"', draw(_NUMBER)))
            lines.append(_line(base + "_sum", labels, draw(_NUMBER)))
            lines.append(_line(base + "_count", labels, draw(_NUMBER)))
        else:
            lines.append(_line(base, labels, draw(_NUMBER)))
    if draw(st.integers(0, 5)) == 0:  # a stray sample: an untyped family of one
        lines.append(_line(draw(_METRIC), draw(_labels(escapes)), draw(_NUMBER)))
    return lines


def _page(escapes: bool) -> st.SearchStrategy[str]:
    return st.lists(_family(escapes), max_size=6).map(
        lambda fams: "".join(line + "\n" for fam in fams for line in fam)
    )


def _some_names(text: str, pick: list[bool]) -> set[str]:
    present = sorted(set(re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", text)))
    return {n for n, keep in zip(present, pick) if keep}


@DIFF
@given(_page(escapes=False), st.lists(st.booleans(), max_size=40))
def test_plain_pages_read_the_same_and_never_reach_prometheus_client(
    text: str, pick: list[bool]
) -> None:
    want = reference(text)
    names = _some_names(text, pick)
    want_some = reference(text, names)
    with slow_calls() as seen:
        got = fast(text)
        got_some = fast(text, names)
    assert got == want
    assert got_some == want_some
    # Past 300 characters a number is left to prometheus-client (float(int) overflows at 309).
    assert seen == [] or any(len(word) > 300 for word in text.split())


@DIFF
@given(_page(escapes=True), st.lists(st.booleans(), max_size=40))
def test_pages_with_escapes_read_the_same(text: str, pick: list[bool]) -> None:
    want = reference(text)
    names = _some_names(text, pick)
    with slow_calls() as seen:
        assert fast(text) == want
        assert fast(text, names) == reference(text, names)
    # Only families holding an escape (or an over-long number) reach prometheus-client.
    for family in seen:
        assert "\\" in family or any(len(word) > 300 for word in family.split())


# Forms prometheus-client accepts that the fast path leaves to it.
ODD_LINES = [
    'm{a="x\\"y"} 1',  # an escaped quote
    'm{a="x\\\\"} 1',  # an escaped backslash
    'm{a="x\\ny"} 1',  # an escaped newline
    "m 1 1700000000000",  # a timestamp
    'm{a="x"} 1 1700000000000',
    "m  1",  # two spaces
    "m\t1",  # a tab
    'm{a = "x"} 1',  # spaces around =
    'm{ a="x" } 1',
    'm{a="x"}1',  # no space before the value
    "m inf",  # float() spellings other than Inf/NaN
    "m -nan",
    " m 1",  # leading whitespace
    "m 1 ",
    'm{"a"="x"} 1',  # a quoted label name
]


@pytest.mark.parametrize("odd", ODD_LINES)
def test_an_odd_line_goes_to_prometheus_client_with_its_family_only(odd: str) -> None:
    text = (
        "# TYPE a counter\na 1\n"  # renamed to a_total: needs the # TYPE context
        "# HELP m Odd.\n# TYPE m gauge\n"
        f"{odd}\n"
        'm{a="y"} 2\n'
        "# TYPE z_seconds histogram\n"
        'z_seconds_bucket{le="+Inf"} 3\nz_seconds_sum 1.5\nz_seconds_count 3\n'
    )
    want = reference(text)
    with slow_calls() as seen:
        assert fast(text) == want
    assert len(seen) == 1
    assert odd in seen[0]
    assert "# TYPE m gauge" in seen[0]
    assert "a 1" not in seen[0] and "z_seconds" not in seen[0]


@pytest.mark.parametrize(
    ("text", "want"),
    [
        # prometheus-client's counter renaming, by the family's final # TYPE
        ("# TYPE c counter\nc 1\n", [("c_total", 1.0)]),
        ("# TYPE c_total counter\nc_total 1\n", [("c_total", 1.0)]),
        ("# TYPE c counter\nc 1\n# TYPE c gauge\nc 2\n", [("c", 1.0), ("c", 2.0)]),
        ("# HELP c C.\n# TYPE c counter\nc 1\n", [("c_total", 1.0)]),
        # a sample outside its family starts an untyped family of one, not renamed
        ("# TYPE c counter\nc 1\nd 2\nc 3\n", [("c_total", 1.0), ("d", 2.0), ("c", 3.0)]),
        ("# TYPE c counter\nc_total 1\n", [("c_total", 1.0)]),
        # a histogram's own names, and one that is not its
        (
            '# TYPE h histogram\nh_bucket{le="1"} 1\nh_sum 2\nh_count 1\nh 5\n',
            [("h_bucket", 1.0), ("h_sum", 2.0), ("h_count", 1.0), ("h", 5.0)],
        ),
        # an integer value is read as prometheus-client does: -0 is +0 there
        ("m -0\n", [("m", 0.0)]),
        ("m -0.0\n", [("m", -0.0)]),
        ("m -00\n", [("m", 0.0)]),
        ("m -0e0\n", [("m", -0.0)]),
    ],
)
def test_family_rules_match_prometheus_client(text: str, want: list[tuple[str, float]]) -> None:
    got = parse(text)
    assert [(s.name, s.value.hex()) for s in got.samples] == [(n, v.hex()) for n, v in want]
    assert fast(text) == reference(text)


def test_an_indented_comment_still_names_the_family_for_what_follows() -> None:
    # prometheus-client strips each line: "  # TYPE b gauge" opens family b, so the
    # later "# TYPE b counter" retypes that same family and renames both samples.
    text = '# TYPE a gauge\na{ x="1"} 1\n  # TYPE b gauge\nb 1\n# TYPE b counter\nb 2\n'
    assert fast(text) == reference(text)
    assert [s.name for s in parse(text).samples] == ["a", "b_total", "b_total"]


def test_an_integer_past_float_range_is_skipped_as_before() -> None:
    # prometheus-client reads it as an int, which float() cannot hold; "1e999" is a float: inf.
    got = parse("a " + "9" * 309 + "\nb 1e999\nc " + "9" * 308 + "\n")
    assert [(s.name, s.value) for s in got.samples] == [("b", math.inf), ("c", float("9" * 308))]
    assert got.skipped_lines == 1


def test_a_garbled_line_costs_only_its_own_family() -> None:
    text = '# TYPE a counter\na 1\n# TYPE b gauge\nb{x="1" 2\nb{x="2"} 3\n# TYPE c counter\nc 4\n'
    got = parse(text)
    # a and c keep their # TYPE (and so prometheus-client's _total); b loses one line.
    assert [(s.name, s.labels, s.value) for s in got.samples] == [
        ("a_total", {}, 1.0),
        ("b", {"x": "2"}, 3.0),
        ("c_total", {}, 4.0),
    ]
    assert got.skipped_lines == 1


def test_a_caller_changing_its_labels_does_not_change_the_next_parse() -> None:
    line = 'm{engine="0",le="0.5"} 1\n'
    first = parse(line).samples[0]
    first.labels["engine"] = "changed"
    again = parse('m{engine="0",le="0.5"} 2\n').samples[0]
    assert again.labels == {"engine": "0", "le": "0.5"}
    assert again.value == 2.0


def test_a_remembered_series_with_a_bad_number_is_still_rejected() -> None:
    assert parse('m{a="1"} 5\n').samples[0].value == 5.0
    got = parse('m{a="1"} 5x\nm{a="2"} 6\n')
    assert [(s.labels["a"], s.value) for s in got.samples] == [("2", 6.0)]
    assert got.skipped_lines == 1


# --- mutated real pages -----------------------------------------------------

UNDER_LOAD = (Path(__file__).resolve().parent.parent / "fixtures" / FIXTURES[1]).read_text(
    encoding="utf-8"
)
_MUTANTS = list(' \t{}"\\,=#e-+.0a_:IN\n')


def _edited(page: str, rnd: random.Random, edits: int) -> str:
    """``page`` with ``edits`` characters inserted, deleted or replaced at random."""
    lines = page.splitlines()
    for _ in range(edits):
        i = rnd.randrange(len(lines))
        line = lines[i]
        j = rnd.randrange(len(line) + 1)
        op = rnd.randrange(3)
        c = rnd.choice(_MUTANTS)
        if op == 0:
            line = line[:j] + c + line[j:]
        elif op == 1:
            line = line[:j] + line[j + 1 :]
        else:
            line = line[:j] + c + line[j + 1 :]
        lines[i] = line
    return "\n".join(lines) + "\n"


def _edited_pages(most: int) -> st.SearchStrategy[str]:
    """The vLLM page under load with 1 to ``most`` characters edited at random."""
    rnds = st.randoms(use_true_random=False)
    return st.builds(_edited, st.just(UNDER_LOAD), rnds, st.integers(1, most))


# A hundred edited pages a test, however slow the machine.
_MANY = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_MANY
@given(_edited_pages(6))
def test_a_mutated_real_page_reads_as_prometheus_client_reads_it(page: str) -> None:
    for names in (None, VLLM_NAMES):
        got = parse(page, names)  # never raises, whatever the edit
        try:
            want = reference(page, names)
        except Exception:
            continue  # prometheus-client rejects the page: nothing to compare with
        assert got.skipped_lines == 0
        assert [_key(s.name, s.labels, s.value) for s in got.samples] == want


# --- the next page through the last one's layout ------------------------------


def _layout_read(first: str, then: str, names: Collection[str] | None) -> promtext.Exposition:
    layout = promtext.PageLayout()
    parse(first, names, layout)
    return parse(then, names, layout)


def _renumbered(page: str, numbers: list[str]) -> str:
    out = []
    for i, line in enumerate(page.splitlines()):
        if line and not line.startswith("#"):
            line = line.rpartition(" ")[0] + " " + numbers[i % len(numbers)]
        out.append(line)
    return "\n".join(out) + "\n"


@DIFF
@given(_page(escapes=True), st.lists(_NUMBER, min_size=1, max_size=20), st.booleans())
def test_a_page_repeating_the_last_series_reads_as_a_fresh_parse(
    page: str, numbers: list[str], narrow: bool
) -> None:
    names = VLLM_NAMES | set(re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", page)) if narrow else None
    names = frozenset(names) if names is not None else None
    then = _renumbered(page, numbers)
    fresh = parse(then, names)
    got = _layout_read(page, then, names)
    assert got.skipped_lines == fresh.skipped_lines
    assert [_key(s.name, s.labels, s.value) for s in got.samples] == [
        _key(s.name, s.labels, s.value) for s in fresh.samples
    ]


@_MANY
@given(_edited_pages(4))
def test_a_real_page_changed_anywhere_after_the_last_reads_as_a_fresh_parse(then: str) -> None:
    fresh = parse(then, VLLM_NAMES)
    got = _layout_read(UNDER_LOAD, then, VLLM_NAMES)
    assert got.skipped_lines == fresh.skipped_lines
    assert [_key(s.name, s.labels, s.value) for s in got.samples] == [
        _key(s.name, s.labels, s.value) for s in fresh.samples
    ]


@pytest.mark.parametrize(
    "number",
    [
        "-0",
        "-00",
        "-0.0",
        "+0",
        "1e-05",
        "-1e-05",
        "5x",
        "1 2",
        "9" * 300,
        "9" * 310,
        "NaN",
        "-Inf",
    ],
)
def test_a_repeated_series_reads_each_number_as_a_fresh_parse(number: str) -> None:
    names = frozenset({"m", "n"})
    first = '# TYPE m gauge\nm{a="1"} 5\nn 1\n'
    then = f'# TYPE m gauge\nm{{a="1"}} {number}\nn 2\n'
    fresh = parse(then, names)
    got = _layout_read(first, then, names)
    assert got.skipped_lines == fresh.skipped_lines
    assert [_key(s.name, s.labels, s.value) for s in got.samples] == [
        _key(s.name, s.labels, s.value) for s in fresh.samples
    ]


def test_a_repeated_page_of_no_wanted_sample_reads_none() -> None:
    page = "# HELP m a gauge\n# TYPE m gauge\n"
    assert _layout_read(page, page, frozenset({"m"})).samples == ()


def test_a_family_whose_type_changed_is_not_read_through_the_layout() -> None:
    names = frozenset({"m", "m_total"})
    first = "# TYPE m counter\nm 1\n"
    then = "# TYPE m gauge\nm 2\n"
    assert [s.name for s in _layout_read(first, then, names).samples] == ["m"]
    assert [s.name for s in _layout_read(then, first, names).samples] == ["m_total"]


def test_the_layout_gives_each_read_its_own_labels() -> None:
    layout, names = promtext.PageLayout(), frozenset({"m"})
    first = parse('m{engine="0"} 1\n', names, layout).samples[0]
    generation = layout.generation
    first.labels["engine"] = "changed"
    again = parse('m{engine="0"} 2\n', names, layout).samples[0]
    assert layout.generation == generation  # read through the layout
    assert (again.labels, again.value) == ({"engine": "0"}, 2.0)


def test_a_page_narrowed_to_other_names_is_not_read_through_the_layout() -> None:
    layout = promtext.PageLayout()
    page = "a 1\nb 2\n"
    assert [s.name for s in parse(page, frozenset({"a"}), layout).samples] == ["a"]
    assert [s.name for s in parse(page, frozenset({"b"}), layout).samples] == ["b"]


# --- the page is fetched as plain text ----------------------------------------


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


def test_the_engine_is_not_asked_to_gzip_its_page() -> None:
    # vLLM serves /metrics with prometheus-client's exposition, which gzips the
    # page for any client that accepts gzip (httpx does by default).
    registry = CollectorRegistry()
    Gauge("vllm:num_requests_running", "Running.", ["engine"], registry=registry).labels("0").set(3)
    app = make_wsgi_app(registry)
    encodings: list[str] = []

    def recording_app(environ, start_response):  # type: ignore[no-untyped-def]
        def start(status, headers, exc_info=None):  # type: ignore[no-untyped-def]
            encodings.append(dict(headers).get("Content-Encoding", "identity"))
            return start_response(status, headers, exc_info)

        return app(environ, start)

    server = make_server("127.0.0.1", 0, recording_app, handler_class=_QuietHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
        with httpx.Client(trust_env=False) as plain:
            plain.get(url, timeout=10.0)  # what a default client gets
        with Scraper(url, 10.0) as scraper:
            text = scraper.get()
    finally:
        server.shutdown()
        server.server_close()
    assert encodings == ["gzip", "identity"]
    (s,) = parse(text, VLLM_NAMES).samples
    assert (s.name, s.labels, s.value) == ("vllm:num_requests_running", {"engine": "0"}, 3.0)
