#!/usr/bin/env bash
# Regenerates, with llama.cpp b11312 on this machine, each quantized MoE fixture's golden logits
# (golden/MODEL.json + .f32, by golden.c: the shared fixtures' tool) and its router trace
# (golden/MODEL.router, by gen_trace.c) from the same build, so that the trace belongs to the
# run the logits come from. (Upstream's own logits for these models differ between machines:
# an expert choice on a near-tie flips.) LLAMA = its source tree, BUILD = its build directory.
# usage: LLAMA=... BUILD=... tests/data/moe_trace/gen.sh
set -euo pipefail
cd "$(dirname "$0")"
: "${LLAMA:?the llama.cpp b11312 source tree}" "${BUILD:?its build directory}"
cc -O2 -I"$LLAMA/include" -I"$LLAMA/ggml/include" golden.c -L"$BUILD/bin" -lllama -Wl,-rpath,"$BUILD/bin" -o /tmp/golden_ref
cc -O2 -I"$LLAMA/include" -I"$LLAMA/ggml/include" gen_trace.c -L"$BUILD/bin" -lllama -lggml -lggml-base -Wl,-rpath,"$BUILD/bin" -o /tmp/gen_trace
for f in ../deepseek2/tiny-deepseek2-lite-q8_0 ../deepseek2/tiny-deepseek2-lite-q4_k_m ../deepseek2/tiny-deepseek3-q8_0 ../deepseek2/tiny-deepseek3-q4_k_m \
         ../deepseek-family/tiny-deepseek-moe-q8_0 ../deepseek-family/tiny-deepseek-moe-q4_k_m ../deepseek-family/tiny-deepseek2-legacy-q8_0 ../deepseek-family/tiny-deepseek2-legacy-q4_k_m \
         ../deepseek-family/tiny-deepseek32-q8_0 ../deepseek-family/tiny-deepseek32-q4_k_m \
         ../quants/tiny-deepseek3-ud-iq1_s ../quants/tiny-deepseek3-iq2_xxs ../quants/tiny-deepseek3-iq3_xxs ../quants/tiny-deepseek3-iq4_xs ../quants/tiny-deepseek3-mxfp4_moe \
         ../splits/tiny-deepseek3-q4_k_m-00001-of-00004:tiny-deepseek3-q4_k_m; do
  name=${f#*:}; [ "$name" = "$f" ] && name=$(basename "$f")
  f=${f%%:*}; dir=$(dirname "$f")
  /tmp/golden_ref logits "$f.gguf" "$dir/golden/$name" > /dev/null
  args=$(python3 -c '
import json, sys
g = json.load(open(sys.argv[1]))
j = lambda k: ",".join(map(str, g[k]))
print(j("A_tokens"), j("B_tokens"), j("C_seq0_tokens"), j("C_seq1_tokens"), j("C_seq2_tokens"), g["D_tokens"]["seq1_pos3"], g["D_tokens"]["seq3_pos12"])
' "$dir/golden/$name.json")
  # shellcheck disable=SC2086
  /tmp/gen_trace "$f.gguf" $args > "$dir/golden/$name.router"
  echo "$name: $(stat -c %s "$dir/golden/$name.router") bytes"
done
