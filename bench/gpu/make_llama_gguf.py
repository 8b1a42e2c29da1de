"""Write a random-weight Llama GGUF of a given shape (f16 matrices), for llama.cpp on a GPU.

    python bench/gpu/make_llama_gguf.py FILE [--n-embd 2048] [--n-layer 16] [--n-head 32]
        [--n-head-kv 8] [--n-ff 8192] [--n-ctx 8192]

The defaults are Llama-3.2-1B's shape (about 1 billion parameters besides the vocabulary:
1.9 GiB in f16), big enough that a decode step streams real bytes from HBM. The vocabulary
is deploy/llamacpp/make_tiny_gguf.py's (specials, 256 byte tokens, a few word pieces), so
the output is gibberish; a load test needs nothing more. No hub, no tokenizer download.

The weights come from one pool of seeded normal values (std 0.02), each tensor a window of
it at a random offset: seconds to write instead of a minute of random draws, and the
residual stream stays small through the layers, so f16 never overflows into NaN.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path
from types import ModuleType

import gguf
import numpy as np

ROOT = Path(__file__).resolve().parents[2]


def _tiny() -> ModuleType:
    # deploy/llamacpp is not a package: load the tiny model's script by path for its vocabulary.
    spec = importlib.util.spec_from_file_location(
        "make_tiny_gguf", ROOT / "deploy" / "llamacpp" / "make_tiny_gguf.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write(
    path: Path,
    n_embd: int,
    n_layer: int,
    n_head: int,
    n_head_kv: int,
    n_ff: int,
    n_ctx: int,
    seed: int = 1234,
) -> int:
    """Write the file; return the number of parameters."""
    rng = np.random.default_rng(seed)
    tokens, scores, types = _tiny()._vocab()
    n_vocab = len(tokens)
    head_dim = n_embd // n_head
    n_kv = n_head_kv * head_dim
    biggest = max(n_ff * n_embd, n_vocab * n_embd, n_embd * n_embd)
    pool = (rng.standard_normal(2 * biggest, dtype=np.float32) * 0.02).astype(np.float16)
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
    w.add_name(f"headroom random llama {n_layer}x{n_embd}")
    w.add_context_length(n_ctx)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(500000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
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
    for i in range(n_layer):
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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("file", type=Path)
    p.add_argument("--n-embd", type=int, default=2048)
    p.add_argument("--n-layer", type=int, default=16)
    p.add_argument("--n-head", type=int, default=32)
    p.add_argument("--n-head-kv", type=int, default=8)
    p.add_argument("--n-ff", type=int, default=8192)
    p.add_argument("--n-ctx", type=int, default=8192)
    a = p.parse_args(argv)
    if a.n_embd % a.n_head or a.n_head % a.n_head_kv:
        print("make_llama_gguf: n_embd must divide by n_head, n_head by n_head_kv", file=sys.stderr)
        return 1
    t0 = time.monotonic()
    a.file.parent.mkdir(parents=True, exist_ok=True)
    n = write(a.file, a.n_embd, a.n_layer, a.n_head, a.n_head_kv, a.n_ff, a.n_ctx)
    size = a.file.stat().st_size
    print(
        f"{a.file}: {n / 1e9:.2f} B params, {size / 2**30:.2f} GiB, {time.monotonic() - t0:.1f} s",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
