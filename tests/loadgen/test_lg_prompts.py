"""Synthetic prompts have the lengths asked for; JSONL prompts load or fail in one line."""

from __future__ import annotations

import random
import statistics

import pytest

from loadgen.prompts import AHEAD, PromptSource, load_jsonl, sample_length
from monitor.core.errors import ConfigError


def test_fixed_lengths_and_unique_prefixes() -> None:
    src = PromptSource("completions", input_tokens=50, output_tokens=20, seed=1)
    ps = [src.next() for _ in range(20)]
    assert all(len(p.prompt.split()) == 49 for p in ps)  # a lead word plus 48 common words
    assert all(p.max_tokens == 20 for p in ps)
    assert len({p.prompt.split()[0] for p in ps}) == 20  # no shared prefix for a prefix cache


@pytest.mark.parametrize("dist", ["uniform", "normal", "exponential"])
def test_distributions_centre_on_the_mean(dist: str) -> None:
    rng = random.Random(3)
    xs = [sample_length(rng, 200, dist, 0.5) for _ in range(4000)]
    assert statistics.mean(xs) == pytest.approx(200, rel=0.05)
    assert min(xs) >= 1 and len(set(xs)) > 20


def test_chat_prompts_are_messages() -> None:
    p = PromptSource("chat", 10, 5, seed=0).next()
    assert p.messages is not None and p.messages[0]["role"] == "user" and p.prompt is None


def test_jsonl_formats(tmp_path) -> None:
    f = tmp_path / "p.jsonl"
    f.write_text(
        '"plain text"\n{"prompt": "x", "max_tokens": 7}\n\n{"messages": [{"role": "user", "content": "m"}]}\n'
    )
    comp = load_jsonl(f, "completions", 32)
    assert [p.prompt for p in comp] == ["plain text", "x", "m"]
    assert [p.max_tokens for p in comp] == [32, 7, 32]
    chat = load_jsonl(f, "chat", 32)
    assert chat[0].messages == ({"role": "user", "content": "plain text"},)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("{bad\n", "not JSON"),
        ('{"max_tokens": 3}\n', "needs"),
        ("\n", "no prompts"),
        ("[1]\n", "expected"),
    ],
)
def test_jsonl_errors_name_the_line(tmp_path, text: str, needle: str) -> None:
    f = tmp_path / "p.jsonl"
    f.write_text(text)
    with pytest.raises(ConfigError, match=needle):
        load_jsonl(f, "completions", 8)


def test_missing_file_is_a_config_error(tmp_path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_jsonl(tmp_path / "nope.jsonl", "completions", 8)


@pytest.mark.parametrize("kw", [
    {},
    {"dist": "uniform", "spread": 0.5},
    {"dist": "exponential", "prefix_tokens": 8, "prefix_groups": 3},
])  # fmt: skip
def test_prompts_built_ahead_are_the_ones_built_one_at_a_time(kw: dict) -> None:
    # Built in batches (warmer caches), a seeded source still yields the same prompts in the
    # same order: a run with a seed sends what it sent before.
    ahead = PromptSource("completions", input_tokens=40, output_tokens=20, seed=7, **kw)
    alone = PromptSource("completions", input_tokens=40, output_tokens=20, seed=7, **kw)
    got = [ahead.next() for _ in range(3 * AHEAD + 5)]
    assert got == [alone._build() for _ in range(3 * AHEAD + 5)]
    assert len({p.prompt for p in got}) == len(got)  # and each is its own
