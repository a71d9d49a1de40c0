#!/usr/bin/env bash
# Regenerates this directory's goldens with llama.cpp b11312: the golden-logits program
# (scenarios A–D) built with golden_kv.h, which gives its contexts the KV cache types of
# GOLDEN_TYPE_K / GOLDEN_TYPE_V and flash attention on.
#
#   tests/data/kv_types/gen.sh LLAMA_CPP_SRC LLAMA_CPP_BUILD_BIN [GOLDEN_C]
#
# LLAMA_CPP_SRC: the vendored llama.cpp of llama-cpp-python 0.3.36; LLAMA_CPP_BUILD_BIN: where
# its libllama.so / libggml*.so are (a build as in the README); GOLDEN_C: the golden program's
# source (default: tools/golden.c of this repo).
set -euo pipefail
cd "$(dirname "$0")"
src=$1
bin=$2
golden_c=${3:-../../../tools/golden.c}
cc -O2 -I"$src/include" -I"$src/ggml/include" -include golden_kv.h "$golden_c" -L"$bin" -lllama -lggml -lggml-base -o /tmp/golden_kv
export LD_LIBRARY_PATH=$bin
# model (under tests/data), type_k, type_v (ggml type ids), the golden's suffix
while read -r model k v name; do
  out=$(basename "$model" .gguf)-kv-$name
  GOLDEN_TYPE_K=$k GOLDEN_TYPE_V=$v /tmp/golden_kv logits "../$model" "$out" > /dev/null
  echo "$out"
done <<'LIST'
tiny/tiny-qwen2-f32.gguf 0 0 f32
tiny/tiny-qwen2-f32.gguf 30 30 bf16
tiny/tiny-qwen2-f32.gguf 8 8 q8_0
tiny/tiny-qwen2-f32.gguf 2 2 q4_0
tiny/tiny-qwen2-f32.gguf 3 3 q4_1
tiny/tiny-qwen2-f32.gguf 6 6 q5_0
tiny/tiny-qwen2-f32.gguf 7 7 q5_1
tiny/tiny-qwen2-f32.gguf 20 20 iq4_nl
tiny/tiny-qwen2-f32.gguf 8 1 q8_0-f16
tiny/tiny-qwen2-f32.gguf 1 2 f16-q4_0
tiny/tiny-llama-q8_0.gguf 8 8 q8_0
deepseek2/tiny-deepseek2-lite-f32.gguf 8 8 q8_0
deepseek2/tiny-deepseek2-lite-f32.gguf 2 2 q4_0
deepseek2/tiny-deepseek3-q8_0.gguf 8 8 q8_0
deepseek-family/tiny-deepseek-moe-f32.gguf 8 8 q8_0
LIST
