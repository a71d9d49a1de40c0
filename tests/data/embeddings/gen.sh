#!/usr/bin/env bash
# Regenerates this folder's goldens with llama.cpp b11312 (its build directory as $1).
# usage: tests/data/embeddings/gen.sh /path/to/llama.cpp/build  (models: tests/data, fetched smollm2)
set -euo pipefail
cd "$(dirname "$0")"
B=$1; SRC=${LLAMA_CPP_SRC:-$B/..}
cc -O2 -I"$SRC/include" -I"$SRC/ggml/include" embed.c -L"$B/bin" -lllama -Wl,-rpath,"$B/bin" -o /tmp/embed-golden
M=${DEEPSEEK_MODELS:-$HOME/.cache/deepseek/models}
/tmp/embed-golden ../tiny/tiny-qwen2-f32.gguf tiny-qwen2-f32.f32
/tmp/embed-golden ../tiny/tiny-llama-q8_0.gguf tiny-llama-q8_0.f32
/tmp/embed-golden "$M/smollm2-135m-instruct-q4_1.gguf" smollm2-135m-instruct-q4_1.f32
