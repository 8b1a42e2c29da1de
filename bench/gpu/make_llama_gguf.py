"""Write a random-weight Llama GGUF of Llama-3.2-1B's shape (f16), for llama.cpp on a GPU.

    python bench/gpu/make_llama_gguf.py FILE [--n-embd 2048] [--n-layer 16] [--n-head 32]
        [--n-head-kv 8] [--n-ff 8192] [--n-ctx 8192] [--bpe-tokenizer DIR [--vocab-size 4096]]

deploy/llamacpp/make_tiny_gguf.py writes it (this is that script with a GPU-sized default
shape, f16): about 1 billion parameters besides the vocabulary, 1.9 GiB, big enough that a
decode step streams real bytes from HBM. The vocabulary is the tiny model's ~300-token
SentencePiece one, or with ``--bpe-tokenizer DIR`` a byte-level BPE also saved in DIR as a
Hugging Face tokenizer, so a client that counts tokens with it (GuideLLM) counts what the
server sees. The output is gibberish; a load test needs nothing more. No hub.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
SHAPE = {"n_embd": 2048, "n_layer": 16, "n_head": 32, "n_head_kv": 8, "n_ff": 8192, "n_ctx": 8192}


def _writer() -> ModuleType:
    # deploy/llamacpp is not a package: load the writer by path.
    spec = importlib.util.spec_from_file_location(
        "make_tiny_gguf", ROOT / "deploy" / "llamacpp" / "make_tiny_gguf.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up while being made
    spec.loader.exec_module(module)
    return module


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("file", type=Path)
    for name, default in SHAPE.items():
        p.add_argument("--" + name.replace("_", "-"), type=int, default=default)
    p.add_argument("--bpe-tokenizer", type=Path, default=None, metavar="DIR")
    p.add_argument("--vocab-size", type=int, default=4096)
    a = p.parse_args(argv)
    args = [str(a.file), "--f16"]
    for name in SHAPE:
        args += ["--" + name.replace("_", "-"), str(getattr(a, name))]
    if a.bpe_tokenizer is not None:
        args += ["--bpe-tokenizer", str(a.bpe_tokenizer), "--vocab-size", str(a.vocab_size)]
    t0 = time.monotonic()
    rc = int(_writer().main(args))
    if rc == 0:
        size = a.file.stat().st_size
        print(f"{a.file}: {size / 2**30:.2f} GiB, {time.monotonic() - t0:.1f} s", flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
