#!/usr/bin/env bash
# deepseek4 speed against llama.cpp b11312: writes (once) a synthetic model with DeepSeek-V4-Flash's
# layer shapes (bench/make_synthetic_deepseek4.rs; blocks alternating CSA / HCA compression, 2
# blocks ≈ 7.5 GB under target/bench), then runs upstream's llama-bench on it with upstream's
# library and with ours (LD_PRELOAD), alternating: prompt processing, generation, and both at
# depth 4096 (where the compressed blocks and the indexer's top-k act).
# usage: bench/deepseek4.sh [N_LAYERS] [THREADS] [PAIRS] [EXPERT_TYPE: q4_K | mxfp4]
set -euo pipefail
cd "$(dirname "$0")/.."
L=${1:-2}
T=${2:-2}
PAIRS=${3:-2}
ET=${4:-q4_K}
MODEL=target/bench/synthetic-deepseek4-${L}l$([ "$ET" = q4_K ] || echo "-$ET").gguf
BENCH=${LLAMA_BENCH:-/work/ref/build/bin/llama-bench}
mkdir -p target/bench
if [ ! -f "$MODEL" ]; then
  cargo run --release -q --example make_synthetic_deepseek4 -- "$MODEL" "$L" "$ET"
fi
cargo build -q --release --lib
LIB=$(mktemp -d)
cp target/release/libdeepseek.so "$LIB/"
grep -m1 'model name' /proc/cpuinfo
echo "flags: $(grep -o -w 'avx2\|fma\|f16c\|avx512[a-z_0-9]*\|gfni' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "kernel level: ${DEEPSEEK_KERNELS:-default (the widest the CPU has)}"
echo "model $(basename "$MODEL"), $T threads, commit $(git rev-parse --short HEAD)"
for i in $(seq "$PAIRS"); do
  for engine in deepseek llama.cpp; do
    pre=""
    [ "$engine" = deepseek ] && pre="$LIB/libdeepseek.so"
    echo "== pair $i: $engine"
    LD_PRELOAD=$pre "$BENCH" -m "$MODEL" -t "$T" -p 512 -n 32 -r 2 -o md 2>/dev/null | grep -E '^\|' | tail -n +3
    LD_PRELOAD=$pre "$BENCH" -m "$MODEL" -t "$T" -p 64 -n 16 -d 4096 -r 1 -o md 2>/dev/null | grep -E '^\|' | tail -n +3
  done
done
rm -rf "$LIB"
