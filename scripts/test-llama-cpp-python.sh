#!/usr/bin/env bash
# llama-cpp-python 0.3.36 against libdeepseek: installs the package without its bundled
# llama.cpp into a virtualenv (cached under target/), points LLAMA_CPP_LIB_PATH at a directory
# whose libllama.so is our library, and runs tests/python/test_llama_cpp_python.py on the
# Qwen2.5-Coder-0.5B model. Needs `cargo build --release` first and network access the first time.
# DEEPSEEK_LIB_DIR (default target/release) holds libdeepseek.so and deepseek-cli (`cargo build
# --release -p deepseek-cli`); DEEPSEEK_CLI names another deepseek-cli (tests/llama_cpp_python.rs,
# which runs this script, passes its own profile's).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
MODEL=${DEEPSEEK_MODELS:-$HOME/.cache/deepseek/models}/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
[ -f "$MODEL" ] || scripts/fetch-models.sh qwen05
BIN=${DEEPSEEK_LIB_DIR:-$ROOT/target/release}
LIB=$BIN/libdeepseek.so
[ -f "$LIB" ] || { echo "missing $LIB: run cargo build --release" >&2; exit 1; }
VENV=$ROOT/target/llama-cpp-python-venv
if ! "$VENV/bin/python" -c 'import importlib.metadata as m; assert m.version("llama_cpp_python") == "0.3.36"' 2>/dev/null; then
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  # LLAMA_BUILD=OFF: the package's CMake build installs only the Python code (seconds), no llama.cpp.
  CMAKE_ARGS="-DLLAMA_BUILD=OFF -DLLAVA_BUILD=OFF" "$VENV/bin/pip" install -q --disable-pip-version-check llama-cpp-python==0.3.36
fi
LIBDIR=$ROOT/target/llama-cpp-python-lib
mkdir -p "$LIBDIR"
ln -sfn "$LIB" "$LIBDIR/libllama.so"
LLAMA_CPP_LIB_PATH=$LIBDIR "$VENV/bin/python" tests/python/test_llama_cpp_python.py "$MODEL" "${DEEPSEEK_CLI:-$BIN/deepseek-cli}"
LLAMA_CPP_LIB_PATH=$LIBDIR "$VENV/bin/python" tests/python/test_grammar.py "$MODEL"
