#!/usr/bin/env bash
# Side by side, alternating: our bench/perf.rs and llama.cpp's llama-bench on the same model.
# Usage: bench/compare.sh [MODEL.gguf] [THREADS] [PAIRS]
# Needs a llama.cpp build with llama-bench (LLAMA_BIN, default /work/ref/build/bin).
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL="${1:-$HOME/.cache/deepseek/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf}"
T="${2:-2}"
PAIRS="${3:-3}"
LLAMA_BIN="${LLAMA_BIN:-/work/ref/build/bin}"
cargo bench -q --bench perf --no-run 2>/dev/null
OURS=$(cargo bench -q --bench perf --no-run --message-format=json 2>/dev/null | grep -o '"executable":"[^"]*"' | tail -1 | cut -d'"' -f4)
grep -m1 'model name' /proc/cpuinfo
for i in $(seq "$PAIRS"); do
  echo "== pair $i"
  "$OURS" -m "$MODEL" -t "$T" -p 64 -n 32 -r 3 2>/dev/null | grep -E '^(pp|tg|cpu)' | sed 's/^/deepseek  /'
  if [ -x "$LLAMA_BIN/llama-bench" ]; then
    LD_LIBRARY_PATH="$LLAMA_BIN" "$LLAMA_BIN/llama-bench" -m "$MODEL" -t "$T" -p 64 -n 32 -r 3 -o md 2>/dev/null | grep -E 'pp64|tg32' | sed 's/^/llama.cpp /'
  fi
done
