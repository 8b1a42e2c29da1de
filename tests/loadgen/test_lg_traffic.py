"""Traffic like production, without a server: datasets, traces, exact lengths, shared prefixes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadgen.dataset import load_dataset
from loadgen.prompts import WORDS, PromptSource
from loadgen.tokens import calibrate, local_counter
from loadgen.trace import load_trace, mean_rate
from monitor.core.errors import ConfigError

DATASET = Path(__file__).resolve().parents[2] / "datasets" / "chat-longtail.jsonl"


def _conv(ask: str, reply: str | None) -> dict:
    turns = [{"from": "human", "value": ask}]
    if reply is not None:
        turns.append({"from": "gpt", "value": reply})
    return {"conversations": turns}


def test_sharegpt_json_gives_first_question_and_reply_length(tmp_path) -> None:
    f = tmp_path / "sg.json"
    f.write_text(json.dumps([_conv("how are you", "fine thanks and you"), {"conversations": []},
                             _conv("no reply here", None)]))  # fmt: skip
    ds = load_dataset(f, "completions", None, 128)
    assert ds.format == "sharegpt" and ds.entries == 3
    # The reply-less one has no length to take: dropped, unless max_tokens is given.
    assert [(p.prompt, p.max_tokens, p.input_tokens) for p in ds.prompts] == [("how are you", 4, 3)]
    forced = load_dataset(f, "chat", 16, 128)
    assert sorted(p.messages[0]["content"] for p in forced.prompts) == ["how are you",
                                                                        "no reply here"]  # fmt: skip
    assert {p.max_tokens for p in forced.prompts} == {16}


def test_the_committed_dataset_is_long_tailed_and_sampled_by_seed() -> None:
    a = load_dataset(DATASET, "completions", None, 128, seed=1, limit=200)
    b = load_dataset(DATASET, "completions", None, 128, seed=2, limit=200)
    assert len(a.prompts) == 200 and a.format == "sharegpt"
    ins = sorted(p.input_tokens for p in a.prompts)
    outs = sorted(p.max_tokens for p in a.prompts)
    mean_in, mean_out = sum(ins) / 200, sum(outs) / 200
    # Means near ShareGPT's published 161 / 338 (capped to fit 1024 tokens), medians well below.
    assert 120 < mean_in < 180 and 280 < mean_out < 360
    assert ins[100] < 0.6 * mean_in and ins[197] > 4 * mean_in
    assert [p.prompt for p in a.prompts] != [p.prompt for p in b.prompts]
    again = load_dataset(DATASET, "completions", None, 128, seed=1, limit=20)
    assert [p.prompt for p in again.prompts] == [p.prompt for p in a.prompts[:20]]


def test_plain_jsonl_dataset(tmp_path) -> None:
    f = tmp_path / "p.jsonl"
    f.write_text(
        '{"prompt": "one two", "max_tokens": 5}\n{"messages": [{"role": "user", "content": "hi"}]}\n'
    )
    ds = load_dataset(f, "completions", None, 9)
    assert sorted((p.prompt, p.max_tokens) for p in ds.prompts) == [("hi", 9), ("one two", 5)]


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("this is not json\n", "not JSON"),
        ("[1, 2", "not JSON"),
        ('{"text": "no prompt key"}\n', "no usable prompts in 1 records"),
        ("[]", "no usable prompts"),
    ],
)
def test_bad_datasets_say_what_was_expected(tmp_path, text: str, needle: str) -> None:
    f = tmp_path / "d.json"
    f.write_text(text)
    with pytest.raises(ConfigError, match=needle) as err:
        load_dataset(f, "completions", None, 8)
    assert str(f) in str(err.value) and "\n" not in str(err.value)


def test_trace_loads_in_order_and_refuses_time_going_backwards(tmp_path) -> None:
    f = tmp_path / "t.jsonl"
    f.write_text(
        '{"timestamp": 1000, "input_length": 10, "output_length": 2, "hash_ids": [1, 2]}\n'
        '{"timestamp": 1500, "input_length": 20, "output_length": 3}\n'
        '{"timestamp": 3000, "input_length": 5, "output_length": 1}\n'
    )
    es = load_trace(f, 0.001)
    assert [e.at for e in es] == [0.0, 0.5, 2.0] and es[0].hash_ids == (1, 2)
    assert mean_rate(es) == pytest.approx(1.0)
    f.write_text(f.read_text() + '{"timestamp": 2000, "input_length": 5, "output_length": 1}\n')
    with pytest.raises(ConfigError, match=r"t.jsonl:4: timestamp 2000 goes backwards"):
        load_trace(f)


def _word_tokenizer(path: Path, bos: bool = True) -> Path:
    """A real tokenizers file: one token per word of the list, [UNK] else, BOS in front."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    vocab = {"[UNK]": 0, "<s>": 1} | {w: i + 2 for i, w in enumerate(dict.fromkeys(WORDS))}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    if bos:
        tok.post_processor = processors.TemplateProcessing(
            single="<s> $A", special_tokens=[("<s>", 1)]
        )
    f = path / "tokenizer.json"
    tok.save(str(f))
    return f


def test_a_local_tokenizer_makes_lengths_exact(tmp_path) -> None:
    _word_tokenizer(tmp_path)
    count = local_counter(str(tmp_path))  # a folder holding tokenizer.json
    cal = calibrate(count, "tokenizer T", chat_known=False)
    assert cal is not None and cal.completions_overhead == 1 and cal.chat_overhead is None
    src = PromptSource("completions", 300, 8, seed=3, words=cal.words, overhead=1,
                       prefix_tokens=64, prefix_groups=3)  # fmt: skip
    for _ in range(20):
        p = src.next()
        assert count(p.prompt, False) == p.input_tokens == 364


def test_a_tokenizer_that_cannot_load_names_what_was_tried(tmp_path) -> None:
    with pytest.raises(ConfigError, match="tried .*nope.*hub names are not downloaded"):
        local_counter(str(tmp_path / "nope"))
    bad = tmp_path / "tokenizer.json"
    bad.write_text("{}")
    with pytest.raises(ConfigError, match="not a tokenizers file"):
        local_counter(str(bad))


def test_shared_prefixes_are_the_same_in_every_process_and_groups_differ() -> None:
    a = PromptSource("completions", 20, 4, seed=1, words=WORDS, prefix_tokens=50, prefix_groups=2)
    b = PromptSource("completions", 20, 4, seed=99, words=WORDS, prefix_tokens=50, prefix_groups=2)
    heads_a = {" ".join(a.next().prompt.split()[:50]) for _ in range(40)}
    heads_b = {" ".join(b.next().prompt.split()[:50]) for _ in range(40)}
    assert len(heads_a) == 2 and heads_a == heads_b
    bodies = {" ".join(a.next().prompt.split()[50:]) for _ in range(10)}
    assert len(bodies) == 10  # only the prefix is shared


def test_trace_entries_naming_the_same_blocks_share_their_text() -> None:
    src = PromptSource("completions", 8, 8, seed=0, words=WORDS)
    one = src.trace_prompt(100, 5, (7, 8), block_tokens=32).prompt.split()
    two = src.trace_prompt(120, 5, (7, 9), block_tokens=32).prompt.split()
    assert len(one) == 100 and len(two) == 120
    assert one[:32] == two[:32] and one[32:64] != two[32:64]


def _closed_port() -> str:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"  # nothing listens once closed


@pytest.mark.parametrize(
    ("make", "flag", "needle"),
    [
        (lambda d: d / "x.json", "--dataset", "not JSON"),
        (lambda d: d / "empty.jsonl", "--dataset", "no usable prompts"),
        (lambda d: d / "back.jsonl", "--trace", "goes backwards"),
        (lambda d: d / "missing-tok", "--tokenizer", "cannot load a tokenizer, tried"),
    ],
)
def test_bad_traffic_input_is_one_line_and_exit_1_before_any_request(
    tmp_path, capsys, make, flag: str, needle: str
) -> None:
    from headroom.cli import main

    (tmp_path / "x.json").write_text("{oops")
    (tmp_path / "empty.jsonl").write_text('{"conversations": []}\n')
    (tmp_path / "back.jsonl").write_text(
        '{"timestamp": 2, "input_length": 1, "output_length": 1}\n'
        '{"timestamp": 1, "input_length": 1, "output_length": 1}\n'
    )
    # The target does not answer: an error about the file proves nothing was sent first.
    rc = main(["sweep", "--target", _closed_port(), flag, str(make(tmp_path)),
               "--out", str(tmp_path / "out")])  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert rc == 1
    assert needle in err and str(tmp_path) in err and len(err.splitlines()) == 1
    assert "cannot reach" not in err
