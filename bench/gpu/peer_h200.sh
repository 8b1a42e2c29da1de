#!/usr/bin/env bash
# One device call: headroom sweep beside GuideLLM on llama.cpp's CUDA server (issue 30).
# Builds llama-server (reused while the machine stays warm: llamacpp_build.sh), writes the
# ~1B random Llama with a byte-level BPE vocabulary and its Hugging Face tokenizer folder
# (once per warm machine), then runs bench/gpu/peer_llamacpp.py at each load.
#
# Usage (from the folder that holds src/, whl/, whl_peer/ and llama.cpp.tar.xz, with $OUT set):
#   bash src/bench/gpu/peer_h200.sh [LOADS] [HOLD_S] [BUDGET_S]
# Everything worth keeping is under $OUT: peer_llamacpp_h200.txt (the table), peer-work.tar.gz
# (each client's log and headroom's sweep.json, GuideLLM's scenario files, peer.json).
# headroom's sweep reads the GPU through NVML (peer_llamacpp.py --nvml auto, on where nvidia-smi
# lists a GPU): the table's last columns are its mean power and joules per output token.
# For a dry run elsewhere: PEER_WORK (default /tmp/l30), PEER_SHAPE (make_llama_gguf.py's shape
# flags, default Llama-3.2-1B's), PEER_PARALLEL (default 32), PEER_ARGS (more peer_llamacpp.py
# flags, after the defaults: --input-tokens 64, say).
set -u -o pipefail
LOADS="${1:-1,4,16,32}"
HOLD_S="${2:-25}"
BUDGET_S="${3:-570}"
START=$(date +%s)
HERE="$(pwd)"
SRC="$HERE/src"
WORK="${PEER_WORK:-/tmp/l30}"
PARALLEL="${PEER_PARALLEL:-32}"
mkdir -p "$WORK" "$OUT"

# headroom's wheels (locust, gguf, ...) and GuideLLM's, one version of each across both.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site "$HERE"/whl/*.whl "$HERE"/whl_peer/*.whl || exit 1
export PYTHONPATH=/tmp/site
python3 -m pip list 2>/dev/null | grep -i -E \
    '^(click|datasets|fsspec|pyarrow|httpx|huggingface.hub|transformers|tokenizers|torch|guidellm|pydantic) '
python3 -c 'import guidellm.benchmark, datasets; print("guidellm imports")' 2>&1 | tail -n 3

SERVER="$(bash "$SRC/bench/gpu/llamacpp_build.sh" "$HERE/llama.cpp.tar.xz" "$WORK/llama.cpp" 16 \
    2> >(tee "$OUT/build.log" | grep -E 'Error|error:|built in|reusing' >&2) | tail -n1)"
echo "build+reuse took $(($(date +%s) - START)) s; server: $SERVER"
[[ -x "$SERVER" ]] || { tail -n 40 "$OUT/build.log"; exit 1; }

MODEL="$WORK/llama-1b-f16-bpe.gguf"
TOK="$WORK/bpe-tokenizer"
# shellcheck disable=SC2086  # PEER_SHAPE and PEER_ARGS are lists of flags
python3 "$SRC/bench/gpu/make_llama_gguf.py" "$MODEL" --bpe-tokenizer "$TOK" ${PEER_SHAPE:-} || exit 1

echo "peer run at loads $LOADS with $((BUDGET_S - ($(date +%s) - START))) s left"
python3 "$SRC/bench/gpu/peer_llamacpp.py" --server "$SERVER" --model "$MODEL" --tokenizer "$TOK" \
    --parallel "$PARALLEL" --loads "$LOADS" --input-tokens 256 --output-tokens 256 --warmup-s 5 \
    --hold-s "$HOLD_S" --guidellm "python3 -m guidellm" --work "$WORK/peer" \
    --out "$OUT/peer_llamacpp_h200.txt" --deadline $((START + BUDGET_S)) ${PEER_ARGS:-}
# GuideLLM's own reports hold every request (megabytes each): its logs and peer.json carry
# the figures, so the reports stay behind.
tar -czf "$OUT/peer-work.tar.gz" -C "$WORK" --exclude='guidellm-*[0-9].json' peer
echo "done in $(($(date +%s) - START)) s"
