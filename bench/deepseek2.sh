#!/usr/bin/env bash
# deepseek2 speed against llama.cpp: writes (once) a synthetic model with DeepSeek-V2-Lite's layer
# shapes and Q4_K_M-style random weights (bench/make_synthetic_deepseek2.rs; 4 layers ≈ 1.1 GB
# under target/bench), prints its KV bytes per token, then runs bench/compare.sh on it.
# usage: bench/deepseek2.sh [N_LAYERS] [THREADS] [PAIRS] [EXPERT_TYPE] [SHAPE]
#   EXPERT_TYPE: the routed experts' ggml type, q4_K (default) or e.g. iq2_xxs (random valid
#   blocks: the shape of the IQ2_XXS community files' experts, for speed only)
#   SHAPE: v2lite (default) or v32: a deepseek32 file with DeepSeek-V3.2's widths, 256 experts
#   and its lightning indexer (top-k 2048); 2 layers (1 dense, 1 MoE) ≈ 6.8 GB
set -euo pipefail
cd "$(dirname "$0")/.."
L=${1:-4}
ET=${4:-q4_K}
SHAPE=${5:-v2lite}
MODEL=target/bench/synthetic-$([ "$SHAPE" = v32 ] && echo deepseek32 || echo deepseek2)-${L}l$([ "$ET" = q4_K ] || echo "-$ET").gguf
mkdir -p target/bench
if [ ! -f "$MODEL" ]; then
  cargo run --release -q --example make_synthetic_deepseek2 -- "$MODEL" "$L" "$ET" "$SHAPE"
fi
bench/compare.sh "$MODEL" "${2:-2}" "${3:-2}"
