"""Write a tiny random-weight Llama as one GGUF file that llama.cpp's server can load, offline.

Run it with any Python that has the ``gguf`` package (and numpy):

    python deploy/llamacpp/make_tiny_gguf.py [FILE]

FILE defaults to $HEADROOM_TINY_GGUF or ~/.cache/headroom/tiny-llama.gguf. The file is reused
when its recipe (a sidecar JSON) matches this script's, so a second run is instant. Prints
the file's path. The weights are random (seeded): the model emits gibberish, which is all a
load test needs. llama.cpp's own HF converter refuses the tiny HF Llama of deploy/vllm-cpu
(its pre-tokenizer is not one it knows), so this writes the GGUF directly: a SentencePiece
("llama") vocabulary of the specials, the 256 byte tokens and a few word pieces.
"""

from __future__ import annotations

import json
import os
import string
import sys
from pathlib import Path

import gguf
import numpy as np

# Bump "version" when the recipe changes, so cached files are rebuilt.
RECIPE = {
    "version": 1,
    "n_embd": 512,
    "n_ff": 1536,
    "n_layer": 4,
    "n_head": 8,
    "n_ctx": 4096,
    "seed": 1234,
}


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


def write(path: Path) -> None:
    r = RECIPE
    rng = np.random.default_rng(r["seed"])
    tokens, scores, types = _vocab()
    n_vocab, n_embd, n_ff, n_head = len(tokens), r["n_embd"], r["n_ff"], r["n_head"]

    def weight(*shape: int) -> np.ndarray:
        # numpy's (rows, cols) is ggml's (cols, rows): (out, in) as llama.cpp wants.
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    def ones(n: int) -> np.ndarray:
        return np.ones(n, dtype=np.float32)

    tmp = path.with_suffix(".tmp")
    w = gguf.GGUFWriter(str(tmp), "llama")
    w.add_name("headroom tiny llama")
    w.add_context_length(r["n_ctx"])
    w.add_embedding_length(n_embd)
    w.add_block_count(r["n_layer"])
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head)
    w.add_rope_dimension_count(n_embd // n_head)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_chat_template(
        "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n"
        "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
    )
    w.add_tensor("token_embd.weight", weight(n_vocab, n_embd))
    for i in range(r["n_layer"]):
        w.add_tensor(f"blk.{i}.attn_norm.weight", ones(n_embd))
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            w.add_tensor(f"blk.{i}.{name}.weight", weight(n_embd, n_embd))
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


def ensure(path: Path) -> Path:
    recipe = path.with_suffix(".recipe.json")
    if path.exists() and recipe.exists() and json.loads(recipe.read_text()) == RECIPE:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    write(path)
    recipe.write_text(json.dumps(RECIPE))
    return path


if __name__ == "__main__":
    print(ensure(Path(sys.argv[1]) if len(sys.argv) > 1 else default_path()))
