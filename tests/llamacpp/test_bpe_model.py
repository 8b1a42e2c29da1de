"""make_tiny_gguf.py --bpe-tokenizer: llama-server counts tokens as the saved tokenizer does.

A client that builds prompts of N tokens with the tokenizer folder (GuideLLM, `headroom
sweep --tokenizer`) must send prompts the server also counts as N tokens.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from llamacpp_support import ROOT, serve, skip_or_fail

pytestmark = [pytest.mark.llamacpp, pytest.mark.timeout(600)]

WRITER = ROOT / "deploy" / "llamacpp" / "make_tiny_gguf.py"
TEXTS = [
    "the and of",
    "It is a truth universally acknowledged, that a single man in possession of a good fortune",
    "Hello, world! It's 2026; numbers 12345 and 3.14 -- don't we'll  spaces\n\nnew\tlines ",
    "naive caf\u00e9 \u2014 \u201cquotes\u201d \u65e5\u672c\u8a9e \U0001f642",
]


def _post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read())


def test_the_server_tokenizes_as_the_tokenizer_folder(tmp_path: Path) -> None:
    from tokenizers import Tokenizer

    try:
        serve.ensure_binary()
    except serve.LlamaSetupError as exc:
        skip_or_fail(f"llama.cpp cannot be built here: {exc}")
    model, folder = tmp_path / "bpe.gguf", tmp_path / "tok"
    shape = [
        "--n-embd",
        "64",
        "--n-layer",
        "1",
        "--n-head",
        "2",
        "--n-head-kv",
        "2",
        "--n-ff",
        "128",
    ]
    proc = subprocess.run(
        [sys.executable, str(WRITER), str(model), *shape, "--bpe-tokenizer", str(folder),
         "--vocab-size", "2000"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(model)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast"
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    assert tok.get_vocab_size() == 2000
    # The common words a load generator's prompts are made of are one token each.
    assert len(tok.encode(" the and of water people").ids) == 5

    with serve.LlamaServer(parallel=1, slot_ctx=512, model=model) as server:
        for text in TEXTS:
            served = _post(server.url + "/tokenize", {"content": text})["tokens"]
            assert served == tok.encode(text).ids, text
        # And a completion's prompt, as the server's usage reports it: no BOS added.
        out = _post(
            server.url + "/v1/completions",
            {"prompt": TEXTS[1], "max_tokens": 3, "ignore_eos": True},
        )
        assert out["usage"]["prompt_tokens"] == len(tok.encode(TEXTS[1]).ids)
        assert out["usage"]["completion_tokens"] == 3


def test_a_bad_shape_is_one_line_and_exit_1(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(WRITER), str(tmp_path / "m.gguf"), "--n-embd", "100", "--n-head", "3"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        "make_tiny_gguf: n_embd must divide by n_head, n_head by n_head_kv"
    ]
    assert not (tmp_path / "m.gguf").exists()
