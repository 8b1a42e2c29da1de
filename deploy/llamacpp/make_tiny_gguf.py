"""Write a random-weight Llama as one GGUF file that llama.cpp's server can load, offline.

Run it with any Python that has the ``gguf`` package (and numpy; ``tokenizers`` too for
``--bpe-tokenizer``):

    python deploy/llamacpp/make_tiny_gguf.py [FILE] [--n-embd N] [--n-layer N] [--n-head N]
        [--n-head-kv N] [--n-ff N] [--n-ctx N] [--f16] [--bpe-tokenizer DIR [--vocab-size N]]

With no options it writes the tiny model the tests serve (4 layers of 512, f32). FILE
defaults to $HEADROOM_TINY_GGUF or ~/.cache/headroom/tiny-llama.gguf. The file is reused
when its recipe (a sidecar JSON) matches the one asked for, so a second run is instant.
Prints the file's path. The weights are random (seeded): the model emits gibberish, which is
all a load test needs. llama.cpp's own HF converter refuses the tiny HF Llama of
deploy/vllm-cpu (its pre-tokenizer is not one it knows), so this writes the GGUF directly.

The vocabulary is one of two:

- by default a SentencePiece ("llama") one of the specials, the 256 byte tokens and a few
  word pieces (about 300 tokens);
- with ``--bpe-tokenizer DIR``, a byte-level BPE of ``--vocab-size`` tokens trained here on
  seeded generated text, written both into the GGUF (GPT-2's model and pre-tokenizer, as
  llama.cpp reads them) and into DIR as a Hugging Face tokenizer (tokenizer.json,
  tokenizer_config.json) that ``transformers.AutoTokenizer`` loads offline. A client that
  counts tokens with DIR (GuideLLM, ``headroom sweep --tokenizer DIR``) then counts what the
  server sees. No BOS is added on either side.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import string
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf
import numpy as np

# Bump "version" when the recipe's meaning changes, so cached files are rebuilt.
RECIPE: dict[str, Any] = {
    "version": 2,
    "n_embd": 512,
    "n_ff": 1536,
    "n_layer": 4,
    "n_head": 8,
    "n_head_kv": 8,
    "n_ctx": 4096,
    "f16": False,
    "seed": 1234,
    "bpe_tokenizer": None,  # a folder: byte-level BPE vocabulary, also saved there
    "vocab_size": 4096,
}
EOT = "<|endoftext|>"
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


@dataclass(frozen=True)
class Vocab:
    model: str  # tokenizer.ggml.model: "llama" (SentencePiece) or "gpt2" (byte-level BPE)
    tokens: list[str]
    types: list[int]
    scores: list[float] | None = None
    merges: list[str] | None = None
    pre: str | None = None  # tokenizer.ggml.pre
    bos: int | None = None
    eos: int | None = None
    unk: int | None = None
    add_bos: bool = False


def default_path() -> Path:
    env = os.environ.get("HEADROOM_TINY_GGUF")
    return Path(env) if env else Path.home() / ".cache" / "headroom" / "tiny-llama.gguf"


def _vocab() -> tuple[list[str], list[float], list[int]]:
    tokens = ["<unk>", "<s>", "</s>"]
    types = [
        gguf.TokenType.UNKNOWN,
        gguf.TokenType.CONTROL,
        gguf.TokenType.CONTROL,
    ]
    # Byte fallback: any text tokenizes, whatever the load generator sends.
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [gguf.TokenType.BYTE] * 256
    words = (
        ["\u2581"] + [f"\u2581{c}" for c in string.ascii_lowercase] + list(string.ascii_lowercase)
    )
    words += ["\u2581the", "\u2581and", "\u2581of", "\u2581to", "\u2581in", "\u2581is"]
    tokens += words
    types += [gguf.TokenType.NORMAL] * len(words)
    scores = [0.0] * (3 + 256) + [-float(i) for i in range(len(words))]
    return tokens, scores, [int(t) for t in types]


def sentencepiece_vocab() -> Vocab:
    tokens, scores, types = _vocab()
    return Vocab("llama", tokens, types, scores=scores, bos=1, eos=2, unk=0, add_bos=True)


# -- byte-level BPE ----------------------------------------------------------------------

COMMON = (
    "the of and to in is you that it he was for on are as with his they at be this have from "
    "or one had by word but not what all were we when your can said there use an each which "
    "she do how their if will up other about out many then them these so some her would make "
    "like him into time has look two more write go see number no way could people my than "
    "first water been call who oil its now find long down day did get come made may part over "
    "new sound take only little work know place year live me back give most very after thing "
    "our just name good sentence man think say great where help through much before line right "
    "too mean old any same tell boy follow came want show also around form three small set put "
    "end does another well large must big even such because turn here why ask went men read "
    "need land different home us move try kind hand picture again change off play spell air "
    "away animal house point page letter mother answer found study still learn should world"
).split()


def _corpus(seed: int, words: int = 120_000) -> list[str]:
    """Seeded English-like text: common words, made-up words, numbers and punctuation.

    The made-up words (syllables of 1-4) give the trainer enough distinct pieces to fill a
    vocabulary of a few thousand; the common words become one token each after a space."""
    rng = random.Random(seed)
    cons, vows = "bcdfghjklmnprstvwz", "aeiou"
    made = [
        "".join(rng.choice(cons) + rng.choice(vows) for _ in range(rng.randint(1, 4)))
        for _ in range(6000)
    ]
    zipf = [1.0 / (i + 1) for i in range(len(made))]
    lines, line = [], []
    for _ in range(words):
        r = rng.random()
        if r < 0.6:
            w = rng.choice(COMMON)
        elif r < 0.95:
            w = rng.choices(made, zipf)[0]
        else:
            w = str(rng.randrange(10 ** rng.randint(1, 4)))
        if rng.random() < 0.1:
            w = w.capitalize()
        line.append(w + (rng.choice(",.;:!?") if rng.random() < 0.08 else ""))
        if len(line) >= 12 and rng.random() < 0.1:
            lines.append(" ".join(line))
            line = []
    lines.append(" ".join(line))
    return lines


def train_bpe(vocab_size: int, seed: int) -> Any:
    """A byte-level BPE (GPT-2's pre-tokenizer) trained on ``_corpus(seed)``: a ``tokenizers.Tokenizer``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(seed), trainer=trainer)
    return tok


def save_hf(tok: Any, folder: Path, n_ctx: int) -> None:
    """The tokenizer as a Hugging Face folder that AutoTokenizer loads with no network."""
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": EOT,
        "eos_token": EOT,
        "unk_token": EOT,
        "add_bos_token": False,
        "add_eos_token": False,
        "model_max_length": n_ctx,
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=1) + "\n")
    (folder / "special_tokens_map.json").write_text(
        json.dumps({"bos_token": EOT, "eos_token": EOT, "unk_token": EOT}, indent=1) + "\n"
    )


def bpe_vocab(tok: Any) -> Vocab:
    """The same vocabulary and merges, as llama.cpp's "gpt2" tokenizer reads them."""
    data = json.loads(tok.to_str())
    vocab: dict[str, int] = data["model"]["vocab"]
    for added in data.get("added_tokens", []):
        vocab[added["content"]] = added["id"]
    tokens = [""] * len(vocab)
    for piece, i in vocab.items():
        tokens[i] = piece
    assert all(tokens), "token ids are not contiguous"
    merges = [m if isinstance(m, str) else " ".join(m) for m in data["model"]["merges"]]
    eot = vocab[EOT]
    types = [int(gguf.TokenType.NORMAL)] * len(tokens)
    types[eot] = int(gguf.TokenType.CONTROL)
    return Vocab("gpt2", tokens, types, merges=merges, pre="gpt-2", bos=eot, eos=eot)


# -- the model ----------------------------------------------------------------------------


def write(path: Path, recipe: dict[str, Any], vocab: Vocab) -> int:
    """Write the GGUF; return its number of parameters.

    The weights come from one pool of seeded normal values (std 0.02), each tensor a window
    of it at a random offset: seconds for a 1B model instead of a minute of draws, and the
    residual stream stays small through the layers, so f16 never overflows into NaN."""
    r = recipe
    n_embd, n_ff, n_head, n_head_kv = r["n_embd"], r["n_ff"], r["n_head"], r["n_head_kv"]
    n_vocab = len(vocab.tokens)
    head_dim = n_embd // n_head
    n_kv = n_head_kv * head_dim
    dtype = np.float16 if r["f16"] else np.float32
    rng = np.random.default_rng(r["seed"])
    biggest = max(n_ff * n_embd, n_vocab * n_embd, n_embd * n_embd)
    pool = (rng.standard_normal(2 * biggest, dtype=np.float32) * 0.02).astype(dtype)
    params = 0

    def weight(rows: int, cols: int) -> np.ndarray:
        # numpy's (rows, cols) is ggml's (cols, rows): (out, in) as llama.cpp wants.
        nonlocal params
        n = rows * cols
        off = int(rng.integers(0, pool.size - n))
        params += n
        return pool[off : off + n].reshape(rows, cols)

    def ones(n: int) -> np.ndarray:
        nonlocal params
        params += n
        return np.ones(n, dtype=np.float32)  # norms stay f32, as llama.cpp's converters write them

    tmp = path.with_suffix(".tmp")
    w = gguf.GGUFWriter(str(tmp), "llama")
    w.add_name(f"headroom random llama {r['n_layer']}x{n_embd}")
    w.add_context_length(r["n_ctx"])
    w.add_embedding_length(n_embd)
    w.add_block_count(r["n_layer"])
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_rope_dimension_count(head_dim)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if r["f16"] else gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model(vocab.model)
    if vocab.pre is not None:
        w.add_tokenizer_pre(vocab.pre)
    w.add_token_list(vocab.tokens)
    w.add_token_types(vocab.types)
    if vocab.scores is not None:
        w.add_token_scores(vocab.scores)
    if vocab.merges is not None:
        w.add_token_merges(vocab.merges)
    if vocab.bos is not None:
        w.add_bos_token_id(vocab.bos)
    if vocab.eos is not None:
        w.add_eos_token_id(vocab.eos)
    if vocab.unk is not None:
        w.add_unk_token_id(vocab.unk)
    w.add_add_bos_token(vocab.add_bos)
    bos = "{{ bos_token }}" if vocab.add_bos else ""
    w.add_chat_template(bos + CHAT_TEMPLATE)
    w.add_tensor("token_embd.weight", weight(n_vocab, n_embd))
    for i in range(r["n_layer"]):
        w.add_tensor(f"blk.{i}.attn_norm.weight", ones(n_embd))
        w.add_tensor(f"blk.{i}.attn_q.weight", weight(n_embd, n_embd))
        w.add_tensor(f"blk.{i}.attn_k.weight", weight(n_kv, n_embd))
        w.add_tensor(f"blk.{i}.attn_v.weight", weight(n_kv, n_embd))
        w.add_tensor(f"blk.{i}.attn_output.weight", weight(n_embd, n_embd))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", ones(n_embd))
        w.add_tensor(f"blk.{i}.ffn_gate.weight", weight(n_ff, n_embd))
        w.add_tensor(f"blk.{i}.ffn_up.weight", weight(n_ff, n_embd))
        w.add_tensor(f"blk.{i}.ffn_down.weight", weight(n_embd, n_ff))
    w.add_tensor("output_norm.weight", ones(n_embd))
    w.add_tensor("output.weight", weight(n_vocab, n_embd))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    tmp.replace(path)
    return params


def ensure(path: Path, recipe: dict[str, Any] | None = None) -> Path:
    """The model of ``recipe`` (default: the tiny one) at ``path``, written unless cached."""
    r = dict(RECIPE if recipe is None else recipe)
    sidecar = path.with_suffix(".recipe.json")
    tok_dir = Path(r["bpe_tokenizer"]) if r["bpe_tokenizer"] else None
    cached = path.exists() and sidecar.exists() and json.loads(sidecar.read_text()) == r
    if cached and (tok_dir is None or (tok_dir / "tokenizer.json").is_file()):
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    if tok_dir is None:
        vocab = sentencepiece_vocab()
    else:
        tok = train_bpe(r["vocab_size"], r["seed"])
        save_hf(tok, tok_dir, r["n_ctx"])
        vocab = bpe_vocab(tok)
    write(path, r, vocab)
    sidecar.write_text(json.dumps(r))
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("file", type=Path, nargs="?", default=None)
    for name in ("n_embd", "n_layer", "n_head", "n_head_kv", "n_ff", "n_ctx", "seed"):
        p.add_argument("--" + name.replace("_", "-"), type=int, default=RECIPE[name])
    p.add_argument("--f16", action="store_true", help="f16 matrices (default f32)")
    p.add_argument("--bpe-tokenizer", type=Path, default=None, metavar="DIR")
    p.add_argument("--vocab-size", type=int, default=RECIPE["vocab_size"])
    a = p.parse_args(argv)
    if a.n_embd % a.n_head or a.n_head % a.n_head_kv:
        print("make_tiny_gguf: n_embd must divide by n_head, n_head by n_head_kv", file=sys.stderr)
        return 1
    if a.bpe_tokenizer is not None and a.vocab_size < 300:
        print("make_tiny_gguf: --vocab-size must be at least 300", file=sys.stderr)
        return 1
    recipe = dict(RECIPE)
    for name in ("n_embd", "n_layer", "n_head", "n_head_kv", "n_ff", "n_ctx", "seed", "f16"):
        recipe[name] = getattr(a, name)
    if a.bpe_tokenizer is not None:
        recipe["bpe_tokenizer"] = str(a.bpe_tokenizer.resolve())
        recipe["vocab_size"] = a.vocab_size
    print(ensure(a.file or default_path(), recipe))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
