#!/usr/bin/env bash
# Tokenizer throughput, deepseek vs llama.cpp, alternating in one run on the same machine.
# usage: bench/tokenize.sh [LLAMA_CPP_BUILD_DIR]   (a b11312 build with bin/libllama.so; see
# DEVELOPERS notes: cmake the vendored llama.cpp of llama-cpp-python 0.3.36)
set -euo pipefail
cd "$(dirname "$0")/.."
UP=${1:-/work/ref/build}
SRC=${LLAMA_CPP_SRC:-/work/ref/llama_cpp_python-0.3.36/vendor/llama.cpp}
MODEL=${DEEPSEEK_MODELS:-$HOME/.cache/deepseek/models}/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
scripts/fetch-models.sh qwen05
cargo build --release -q
ln -sf libdeepseek.so target/release/libdeepseek.so.0
OUT=target/bench; mkdir -p "$OUT"
cc -O2 -std=c11 -Iinclude bench/tokenize.c -o "$OUT/tokenize-deepseek" -Ltarget/release -ldeepseek -Wl,-rpath,"$PWD/target/release"
cc -O2 -std=c11 -I"$SRC/include" -I"$SRC/ggml/include" bench/tokenize.c -o "$OUT/tokenize-llama" -L"$UP/bin" -lllama -Wl,-rpath,"$UP/bin"
# English and code text: the tokenizer corpus; Chinese: the project's seed articles.
python3 - "$OUT/en.txt" <<'PY'
import json, sys
texts = [json.loads(l)["text"] for l in open("tests/data/tokenize/deepseek-r1-qwen.jsonl") if l.strip()]
open(sys.argv[1], "w").write("\n".join(t for t in texts if t.isascii()) * 4)
PY
cat bench/data/zh-seed-*.txt > "$OUT/zh.txt"
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), commit $(git rev-parse --short HEAD)"
for text in en zh; do
  for round in 1 2; do
    d=$("$OUT/tokenize-deepseek" "$MODEL" "$OUT/$text.txt" 3)
    l=$("$OUT/tokenize-llama" "$MODEL" "$OUT/$text.txt" 3)
    echo "$text round $round: deepseek $d | llama.cpp $l"
  done
done
