#!/usr/bin/env bash
# Build llama.cpp's llama-server with CUDA for Hopper (sm_90) on the lent GPU machine.
#
# Usage: bench/gpu/llamacpp_build.sh SRC_TAR_XZ BUILD_DIR [JOBS]
#
# SRC_TAR_XZ is the llama.cpp tree of the llama-cpp-python sdist (deploy/llamacpp/setup.sh's
# source), trimmed to what the CUDA server build needs (bench/gpu/llamacpp_trim.sh). The
# build lands outside the repository copy (a carried folder is replaced on every call, and
# would take the build with it), and a finished build is reused while the machine stays warm.
# Prints the llama-server path last. The machine reaches no network: the web UI is left out
# (no download of prebuilt assets), and so is curl.
set -u -o pipefail

TAR="$1"
DIR="$2"
JOBS="${3:-$(nproc)}"
SERVER="$DIR/build/bin/llama-server"

if [[ -x "$SERVER" && -f "$DIR/.ok" ]]; then
    echo "reusing $SERVER" >&2
    echo "$SERVER"
    exit 0
fi
rm -rf "$DIR"
mkdir -p "$DIR"
tar -xJf "$TAR" -C "$DIR" --strip-components=1 || { echo "cannot unpack $TAR" >&2; exit 1; }

EXTRA=()
# cuBLAS: the CUDA toolkit's own, else the pip wheels' (nvidia-cublas) beside PyTorch.
if ! ls /usr/local/cuda/include/cublas_v2.h >/dev/null 2>&1; then
    inc="$(find / -xdev -name cublas_v2.h -path '*nvidia*' 2>/dev/null | head -n1)"
    lib="$(find / -xdev -name 'libcublas.so*' -path '*nvidia*' 2>/dev/null | head -n1)"
    echo "no cublas in /usr/local/cuda; using ${inc:-none} ${lib:-none}" >&2
    if [[ -n "$inc" && -n "$lib" ]]; then
        mkdir -p "$DIR/cublas"
        libdir="$(dirname "$lib")"
        for f in "$libdir"/libcublas*.so*; do
            b="$(basename "$f")"
            ln -sf "$f" "$DIR/cublas/${b%%.so*}.so"
        done
        EXTRA+=("-DCMAKE_LIBRARY_PATH=$DIR/cublas"
            "-DCMAKE_CUDA_FLAGS=-I$(dirname "$inc")" "-DCMAKE_CXX_FLAGS=-I$(dirname "$inc")")
    fi
fi

t0=$(date +%s)
cmake -S "$DIR" -B "$DIR/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=OFF -DGGML_CUDA_NCCL=OFF \
    -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF "${EXTRA[@]}" >&2 \
    || { echo "cmake configure failed" >&2; exit 1; }
cmake --build "$DIR/build" --target llama-server -j"$JOBS" >&2 \
    || { echo "cmake build failed" >&2; exit 1; }
echo "built in $(($(date +%s) - t0)) s" >&2
[[ -x "$SERVER" ]] || { echo "no $SERVER" >&2; exit 1; }
touch "$DIR/.ok"
echo "$SERVER"
