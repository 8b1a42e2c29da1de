#!/usr/bin/env bash
# One device call: build llama-server with CUDA (reused while the machine stays warm), write
# the ~1B random Llama once, then run the cases of llamacpp_h200.py until BUDGET_S runs out.
#
# Usage (from the folder that holds src/, whl/ and llama.cpp.tar.xz, with $OUT set):
#   bash src/bench/gpu/llamacpp_h200.sh CASES [BUDGET_S]
# Everything worth keeping is under $OUT: build.log, and results-<cases>.tar.gz after each case.
set -u -o pipefail
CASES="${1:-smoke,decode,slots,long,lowload,sweep}"
BUDGET_S="${2:-560}"
START=$(date +%s)
HERE="$(pwd)"
SRC="$HERE/src"
WORK=/tmp/l30
mkdir -p "$WORK" "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total,power.draw,power.limit,clocks.sm \
    --format=csv 2>&1 | tee "$OUT/gpu.txt"

SERVER="$(bash "$SRC/bench/gpu/llamacpp_build.sh" "$HERE/llama.cpp.tar.xz" "$WORK/llama.cpp" 16 \
    2> >(tee "$OUT/build.log" | grep -E 'Error|error:|built in|reusing|cublas|CUDA' >&2) | tail -n1)"
echo "build+reuse took $(($(date +%s) - START)) s; server: $SERVER"
[[ -x "$SERVER" ]] || { tail -n 40 "$OUT/build.log"; exit 1; }
"$SERVER" --version 2>&1 | tail -n 3

MODEL="$WORK/llama-1b-f16.gguf"
if [[ ! -f "$MODEL" ]]; then
    python3 "$SRC/bench/gpu/make_llama_gguf.py" "$MODEL" || exit 1
fi

LEFT=$((BUDGET_S - ($(date +%s) - START)))
echo "cases $CASES with ${LEFT} s left"
TAG="${CASES//,/-}"
python3 "$SRC/bench/gpu/llamacpp_h200.py" --server "$SERVER" --model "$MODEL" \
    --out "$WORK/results-$TAG" --cases "$CASES" --deadline $((START + BUDGET_S)) --tar "$OUT/results-$TAG.tar.gz"
echo "done in $(($(date +%s) - START)) s"
