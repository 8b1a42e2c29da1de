#!/usr/bin/env bash
# Trim llama.cpp's tree (from the llama-cpp-python sdist's vendor/llama.cpp) to what the CUDA
# llama-server build needs, and pack it as one .tar.xz to carry to the GPU machine.
#
# Usage: bench/gpu/llamacpp_trim.sh LLAMA_CPP_DIR OUT.tar.xz
# What goes: models, docs, tests, examples, the web UI's sources (the build leaves the UI
# out), Python packages, and every ggml backend but CPU and CUDA. 176 MiB become ~4 MiB.
set -eu -o pipefail
SRC="$1"
OUT="$2"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
cp -a "$SRC" "$WORK/llama.cpp"
cd "$WORK/llama.cpp"
rm -rf models docs tests benches media gguf-py conversion examples pocs skills requirements \
    .github scripts/*.py scripts/*.sh tools/server/tests tools/server/bench \
    tools/ui/src tools/ui/tests tools/ui/static tools/ui/package-lock.json
for d in blas cann et hip metal musa rpc virtgpu sycl vulkan webgpu zdnn opencl hexagon \
    zendnn openvino; do
    rm -rf "ggml/src/ggml-$d"
done
cd "$WORK"
tar -cJf "$OUT" llama.cpp
ls -la "$OUT" >&2
