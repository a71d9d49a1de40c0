#!/usr/bin/env bash
# Grammar sampler apply time per token, deepseek against llama.cpp b11312 in one process
# (bench/grammar.c dlopens both), on the DeepSeek-R1 vocabulary, for the JSON grammar and others;
# the allowed sets are compared at every step. Writes bench/results/YYYY-MM-DD-HHMM-grammar.md.
# usage: bench/grammar.sh [STEPS=128]   (LLAMA_LIB: directory of upstream's libllama.so)
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${1:-128}
LLAMA_LIB="${LLAMA_LIB:-/work/ref/build/bin}"
TARGET="${CARGO_TARGET_DIR:-target}"
cargo build -q --release --lib
OUT="$(mktemp -d)"
cp "$TARGET/release/libdeepseek.so" "$OUT/libdeepseek.so"
cc -std=c11 -O2 -Iinclude bench/grammar.c -o "$OUT/grammar" -ldl -lm
G=tests/data/grammar
report="bench/results/$(date -u +%Y-%m-%d-%H%M)-grammar.md"
{
  echo "# Grammar sampler: apply time per token, deepseek vs llama.cpp b11312"
  echo
  echo "- $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD), load average $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "- CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores"
  echo "- CPU flags: $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
  bench/kernel_level.sh "$OUT/libdeepseek.so"
  echo "- vocabulary: DeepSeek-R1 (tests/data/vocab/deepseek-r1-qwen.gguf, 152,064 tokens); $STEPS steps per grammar:"
  echo "  every token gets a pseudo-random logit, both samplers apply, the best allowed token is accepted by both."
  echo "  Times are wall-clock µs per \`llama_sampler_apply\` on the full candidate array; the first apply"
  echo "  (which builds our per-vocabulary trie) is left out of the median and mean and shown apart."
  echo
  echo '```'
  "$OUT/grammar" "$OUT/libdeepseek.so" "$LLAMA_LIB/libllama.so" tests/data/vocab/deepseek-r1-qwen.gguf "$STEPS" \
    $G/json.gbnf $G/schema_tool_call.gbnf $G/schema_bounded_string.gbnf $G/c.gbnf $G/english.gbnf $G/schema_person.gbnf
  echo '```'
} | tee "$report"
rm -rf "$OUT"
echo "wrote $report"
