#!/usr/bin/env bash
# Build (once) llama.cpp's `llama-server`, from the sources that ship inside the
# llama-cpp-python source package on PyPI (vendor/llama.cpp), for the tests in tests/llamacpp.
#
# Usage: deploy/llamacpp/setup.sh            # prints the llama-server path on success
# Env:   HEADROOM_LLAMACPP_DIR  build location (default ~/.cache/headroom/llamacpp)
#        HEADROOM_LLAMACPP_PIP  pip used to fetch the source package (default: python3 -m pip)
#
# Idempotent: a marker written after a successful build makes a second run instant.
# Only the server target is built (about 5.5 minutes on 2 cores). On failure it prints one line
# starting with "llama.cpp setup failed:" and exits non-zero (full output in $DIR.build.log).
set -u -o pipefail
WHAT="llama.cpp"
# shellcheck source=../setup_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../setup_lib.sh"

LLAMA_CPP_PYTHON_VERSION="0.3.36"

DIR="${HEADROOM_LLAMACPP_DIR:-$HOME/.cache/headroom/llamacpp}"
PIP="${HEADROOM_LLAMACPP_PIP:-python3 -m pip}"
MARKER="$DIR/.headroom-llamacpp-ok"
WANT="llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION llama-server"
LOG="$DIR.build.log"
SERVER="$DIR/build/bin/llama-server"
exit_if_done "$SERVER"

for tool in cmake ninja g++; do
    command -v "$tool" >/dev/null 2>&1 || fail "$tool is not installed"
done
mkdir -p "$(dirname "$DIR")" || fail "cannot create $(dirname "$DIR")"
: >"$LOG" || fail "cannot write $LOG"
# A half-built tree from an interrupted run is not trusted: start clean.
rm -rf "$DIR" "$DIR.sdist"
mkdir -p "$DIR.sdist" || fail "cannot create $DIR.sdist"

if [[ -z "${HEADROOM_LLAMACPP_PIP:-}" ]] && ! python3 -m pip --version >/dev/null 2>&1; then
    # A Python without pip (Debian's, say): a throwaway venv brings one (ensurepip).
    python3 -m venv "$DIR.sdist/pip-venv" >>"$LOG" 2>&1 \
        || fail "no pip: python3 -m pip and python3 -m venv both failed"
    PIP="$DIR.sdist/pip-venv/bin/python -m pip"
fi

echo "fetching llama-cpp-python $LLAMA_CPP_PYTHON_VERSION sources..." >&2
# The source package, not a wheel: the wheel carries a library, not the server binary.
# pip prepares its metadata in an isolated env (scikit-build-core), which builds nothing.
$PIP download --no-deps --no-binary :all: -d "$DIR.sdist" \
    "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" >>"$LOG" 2>&1 \
    || fail "pip download llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION: $(grep -m1 -i -E "^ *error" "$LOG")"
SDIST="$(ls "$DIR.sdist"/llama_cpp_python-*.tar.gz 2>/dev/null | head -n1)"
[[ -n "$SDIST" ]] || fail "no source package downloaded"
tar -xzf "$SDIST" -C "$DIR.sdist" >>"$LOG" 2>&1 || fail "cannot unpack $SDIST"
SRC="$(ls -d "$DIR.sdist"/llama_cpp_python-*/vendor/llama.cpp 2>/dev/null | head -n1)"
[[ -n "$SRC" ]] || fail "no vendor/llama.cpp in $SDIST"
mv "$SRC" "$DIR" || fail "cannot move the sources to $DIR"
rm -rf "$DIR.sdist"

echo "building llama-server in $DIR (about 5 minutes on 2 cores)..." >&2
# No curl (models are local files), no tests or examples: the server target alone.
cmake -S "$DIR" -B "$DIR/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF >>"$LOG" 2>&1 \
    || fail "cmake configure: $(grep -m1 -E 'Error' "$LOG")"
cmake --build "$DIR/build" --target llama-server -j"${HEADROOM_LLAMACPP_JOBS:-2}" >>"$LOG" 2>&1 \
    || fail "cmake build: $(grep -m1 -E 'error' "$LOG")"
[[ -x "$SERVER" ]] || fail "the build made no $SERVER"
"$SERVER" --help 2>&1 | grep -q -- "--metrics" || fail "the built llama-server has no --metrics flag"

mark_done "$SERVER"
