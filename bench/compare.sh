#!/usr/bin/env bash
# Side by side, alternating (A B A B ...): bench/llama_bench.c built against our libdeepseek and
# against upstream libllama.so (LLAMA_LIB, default /work/ref/build/bin), same model, same threads.
# Usage: bench/compare.sh [MODEL.gguf] [THREADS] [PAIRS]
# OURS_LIB=DIR uses a libdeepseek.so already built in DIR (a copy, so that rebuilding during a
# long comparison does not change the library under it; copy it after `cargo build --release
# --lib`: `cargo test` and `cargo bench` do not refresh target/release/libdeepseek.so).
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL="${1:-$HOME/.cache/deepseek/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf}"
T="${2:-2}"
PAIRS="${3:-3}"
LLAMA_LIB="${LLAMA_LIB:-/work/ref/build/bin}"
TARGET="${CARGO_TARGET_DIR:-target}"
OUT="$(mktemp -d)"
OURS_LIB="${OURS_LIB:-}"
if [ -z "$OURS_LIB" ]; then
  cargo build -q --release --lib
  OURS_LIB="$TARGET/release"
fi
ln -sf libdeepseek.so "$OURS_LIB/libdeepseek.so.0"
cc -O2 -Iinclude bench/llama_bench.c -o "$OUT/ours" -L"$OURS_LIB" -ldeepseek -Wl,-rpath,"$(realpath "$OURS_LIB")"
HAVE_UP=0
if [ -e "$LLAMA_LIB/libllama.so" ]; then
  # upstream's headers (LLAMA_SRC, default the llama-cpp-python 0.3.36 sdist's vendored tree; a
  # bare `find /work/ref` could pick ik_llama.cpp's llama.h, whose API differs)
  LLAMA_SRC="${LLAMA_SRC:-$(find /work/ref -maxdepth 3 -type d -path '*llama_cpp_python-*/vendor/llama.cpp' | head -1)}"
  UPINC="$LLAMA_SRC/include"
  GGINC="$LLAMA_SRC/ggml/include"
  cc -O2 -I"$UPINC" -I"$GGINC" bench/llama_bench.c -o "$OUT/upstream" -L"$LLAMA_LIB" -lllama -Wl,-rpath,"$(realpath "$LLAMA_LIB")" && HAVE_UP=1
fi
grep -m1 'model name' /proc/cpuinfo
echo "flags: $(grep -o 'avx[^ ]*\|fma\|f16c' /proc/cpuinfo | sort -u | tr '\n' ' ')"
bench/kernel_level.sh "$OURS_LIB/libdeepseek.so"
echo "model $(basename "$MODEL"), $T threads, commit $(git rev-parse --short HEAD)"
for i in $(seq "$PAIRS"); do
  echo "deepseek  $("$OUT/ours" "$MODEL" "$T" 64 32 3)"
  [ "$HAVE_UP" = 1 ] && echo "llama.cpp $("$OUT/upstream" "$MODEL" "$T" 64 32 3)"
done | tee "$OUT/runs"
# per pair: ours / llama.cpp for pp and tg tokens/s (wall) and for CPU time per token
# (llama.cpp's / ours, so > 1 means ahead); min, median, max over the pairs
if [ "$HAVE_UP" = 1 ]; then
  awk '/^deepseek/ {for (i = 1; i <= NF; i++) { if ($i ~ /^pp[0-9]/) p = $(i + 1); if ($i ~ /^tg[0-9]/) g = $(i + 1); if ($i == "pp" && $(i - 1) == "ms/token") cp = $(i + 1); if ($i == "tg" && $(i - 2) == "pp") cg = $(i + 1) } }
       /^llama.cpp/ {for (i = 1; i <= NF; i++) { if ($i ~ /^pp[0-9]/) P = $(i + 1); if ($i ~ /^tg[0-9]/) G = $(i + 1); if ($i == "pp" && $(i - 1) == "ms/token") CP = $(i + 1); if ($i == "tg" && $(i - 2) == "pp") CG = $(i + 1) }
                     n++; rp[n] = p / P; rg[n] = g / G; rcp[n] = CP / cp; rcg[n] = CG / cg }
       function show(name, a,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
                                        printf "%-24s min %.2f  median %.2f  max %.2f\n", name, a[1], a[int((n + 1) / 2)], a[n] }
       END { if (n) { print "ratio deepseek / llama.cpp over " n " pairs:"; show("pp tok/s", rp); show("tg tok/s", rg); show("pp cpu/token (inverse)", rcp); show("tg cpu/token (inverse)", rcg) } }' "$OUT/runs"
fi
rm -rf "$OUT"
