"""A page repeating the last one's series is read from its numbers alone (monitor.sources.vllm's
plans): every engine's reading must be what a fresh read of the same page gives."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monitor.sources.vllm import PageMemo, engines_from_text

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
PAGES = sorted(p.name for p in (FIXTURES / "engines").glob("*.txt"))
VLLM_PAGES = ("vllm-0.32.0-cpu-metrics-under-load.txt", "vllm-0.32.0-cpu-metrics-idle.txt")

# Numbers a page may carry, the awkward ones often: a ratio's denominator at 0 or below,
# a bucket that is not finite, a negative zero.
_NUMBER = st.one_of(
    st.sampled_from(["0", "-0", "1", "-1", "NaN", "+Inf", "-Inf", "0.5", "1e-9", "3"]),
    st.floats(-1e6, 1e6, allow_nan=False).map(repr),
)


def _text(name: str) -> str:
    path = FIXTURES / name if name.startswith("vllm-0.32") else FIXTURES / "engines" / name
    return path.read_text()


def _renumbered(page: str, rnd: random.Random, numbers: list[str], share: float) -> str:
    """The page with about ``share`` of its sample lines given another number."""
    out = []
    for line in page.splitlines():
        if line and not line.startswith("#") and rnd.random() < share:
            line = line.rpartition(" ")[0] + " " + rnd.choice(numbers)
        out.append(line)
    return "\n".join(out) + "\n"


@pytest.mark.parametrize("name", [*VLLM_PAGES, *PAGES])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(0, 2**32),
    st.lists(_NUMBER, min_size=1, max_size=12),
    st.floats(0.05, 1.0),
)
def test_renumbered_pages_read_through_the_plans_as_fresh_reads(
    name: str, seed: int, numbers: list[str], share: float
) -> None:
    rnd = random.Random(seed)
    page = _text(name)
    url = "http://h/metrics"
    memo = PageMemo()
    for text in [page] + [_renumbered(page, rnd, numbers, share) for _ in range(3)]:
        through, skipped = engines_from_text(text, url, None, memo)
        fresh, fresh_skipped = engines_from_text(text, url)
        assert through == fresh
        assert skipped == fresh_skipped
    assert memo.grouping is not None and memo.grouping.generation == memo.layout.generation


def test_a_repeated_page_is_read_from_its_numbers_alone() -> None:
    # The point of the plans: a repeat costs neither a parse nor a regrouping.
    page = _text(VLLM_PAGES[0])
    memo = PageMemo()
    engines_from_text(page, "http://h/metrics", None, memo)
    generation, grouping = memo.layout.generation, memo.grouping
    then = page.replace('vllm:num_requests_running{engine="0",model_name="tiny-llama"} 4.0',
                        'vllm:num_requests_running{engine="0",model_name="tiny-llama"} 7.0')  # fmt: skip
    assert then != page
    ((e,), _) = engines_from_text(then, "http://h/metrics", None, memo)
    assert e.running == 7.0
    assert (memo.layout.generation, memo.grouping) == (generation, grouping)


def test_a_ratio_whose_denominator_reads_zero_gives_no_usage_then_comes_back() -> None:
    # Triton's TRT-LLM backend before 24.x gives KV usage only as used / max blocks: the plan
    # made on the first page must judge each page's denominator as a fresh read does.
    page = _text("triton-trtllm-23.10.txt")
    used_max = 'kv_cache_block_type="max",model="tensorrt_llm",version="1"}'
    memo = PageMemo()
    readings = []
    for blocks in ("4096", "0", "NaN", "2000"):
        text = page.replace(f"{used_max} 4096", f"{used_max} {blocks}")
        through, _ = engines_from_text(text, "http://h/metrics", None, memo)
        assert through == engines_from_text(text, "http://h/metrics")[0]
        readings.append(through[0].kv_cache_usage)
    assert readings[0] == pytest.approx(3900 / 4096)
    assert readings[1:3] == [None, None]
    assert readings[3] == pytest.approx(3900 / 2000)


def _two_series_page(a: float, b: float) -> str:
    # One engine, its TTFT histogram in two series (a label beyond the engine's own):
    # the engine's buckets are their sums.
    lines = ['vllm:num_requests_running{engine="0",model_name="m"} 1']
    for extra, n in (("a", a), ("b", b)):
        labels = f'engine="0",model_name="m",part="{extra}"'
        for le, share in (("0.1", 0.5), ("1.0", 1.0), ("+Inf", 1.0)):
            lines.append(
                f'vllm:time_to_first_token_seconds_bucket{{{labels},le="{le}"}} {n * share}'
            )
        lines.append(f"vllm:time_to_first_token_seconds_count{{{labels}}} {n}")
        lines.append(f"vllm:time_to_first_token_seconds_sum{{{labels}}} {n * 0.2}")
    return "\n".join(lines) + "\n"


def test_series_of_one_engine_sharing_a_bucket_bound_add_up() -> None:
    memo = PageMemo()
    for a, b in ((4.0, 6.0), (10.0, 30.0)):
        text = _two_series_page(a, b)
        ((e,), _) = engines_from_text(text, "http://h/metrics", None, memo)
        assert (e,) == engines_from_text(text, "http://h/metrics")[0]
        ttft = e.histogram("time_to_first_token_seconds")
        assert ttft is not None
        assert dict(ttft.buckets)[0.1] == pytest.approx(0.5 * (a + b))
        assert ttft.count == a + b
