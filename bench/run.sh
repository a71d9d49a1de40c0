#!/usr/bin/env bash
# The side-by-side benchmark of the performance issue, in one command: bench/suite.c (load, pp512,
# tg128, 8-sequence batched decode, peak RSS) built against our libdeepseek and against upstream
# llama.cpp's libllama.so, fresh processes alternating (deepseek, llama.cpp, deepseek, ...) PAIRS
# times per model and thread count after one warm-up run of each engine, next to a read-bandwidth
# probe (bench/bandwidth.c). Writes bench/results/YYYY-MM-DD-HHMM.md (bench/report.py) and prints
# it. Wall-clock numbers: run it on a quiet machine.
# Usage: bench/run.sh [PAIRS=5] [MODEL.gguf...]
#   default models: Qwen2.5-Coder 1.5B and 0.5B Q4_K_M from scripts/fetch-models.sh's cache
# Environment:
#   THREADS="1 2"  thread counts; N_PROMPT=512 N_GEN=128 N_SEQ=8 N_BATCH_STEPS=32 (suite.c's sizes)
#   OURS_LIB=DIR   test the libdeepseek.so in DIR instead of building target/release's
#   LLAMA_LIB=DIR  upstream's libllama.so (default /work/ref/build/bin); LLAMA_INC="DIR..." its
#                  llama.h and ggml.h directories (default: found under /work/ref)
#   IK_LLAMA_LIB=DIR IK_LLAMA_INC="DIR..."  ik_llama.cpp's libllama.so and headers: a third engine
#   BASE_LIB=DIR   another build of libdeepseek.so (e.g. the previous commit's): an engine "base"
#                  run through our header, for an A/B of a change in one run
#   NO_UPSTREAM=1  leave llama.cpp out (with BASE_LIB: ours against base only)
# Our library is tested from a copy, so rebuilding it during a run does not change it.
set -euo pipefail

quote_command() { # the invocation with the settings it was given, for the report
  local name argument words=()
  for name in THREADS N_PROMPT N_GEN N_SEQ N_BATCH_STEPS OURS_LIB LLAMA_LIB LLAMA_INC IK_LLAMA_LIB IK_LLAMA_INC BASE_LIB NO_UPSTREAM; do
    if [ -n "${!name+set}" ]; then words+=("$name=$(printf '%q' "${!name}")"); fi
  done
  for argument in "$0" "$@"; do words+=("$(printf '%q' "$argument")"); done
  echo "${words[*]}"
}
COMMAND="$(quote_command "$@")"
cd "$(dirname "$0")/.."

PAIRS="${1:-5}"
if [ $# -gt 0 ]; then shift; fi
if ! [[ "$PAIRS" =~ ^[1-9][0-9]*$ ]]; then echo "PAIRS must be a positive whole number, not '$PAIRS'" >&2; exit 2; fi
MODEL_DIR="${DEEPSEEK_MODELS:-$HOME/.cache/deepseek/models}"
if [ $# -gt 0 ]; then
  MODELS=("$@")
else
  MODELS=("$MODEL_DIR/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf" "$MODEL_DIR/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")
fi
for model in "${MODELS[@]}"; do
  if [ ! -f "$model" ]; then
    echo "model $model not found; scripts/fetch-models.sh qwen05 qwen15 fetches the default ones" >&2
    exit 1
  fi
done
THREADS="${THREADS:-1 2}"
SIZES=("${N_PROMPT:-512}" "${N_GEN:-128}" "${N_SEQ:-8}" "${N_BATCH_STEPS:-32}")
LLAMA_LIB="${LLAMA_LIB:-/work/ref/build/bin}"
TARGET="${CARGO_TARGET_DIR:-target}"

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

if [ -n "${OURS_LIB:-}" ]; then
  OURS_SRC="$OURS_LIB"
else
  cargo build -q --release --lib
  OURS_SRC="$TARGET/release"
fi
mkdir "$WORK/ours"
cp "$OURS_SRC/libdeepseek.so" "$WORK/ours/"
ln -s libdeepseek.so "$WORK/ours/libdeepseek.so.0"
cc -std=c11 -O2 -Iinclude bench/suite.c -o "$WORK/suite-ours" -L"$WORK/ours" -ldeepseek -Wl,-rpath,"$WORK/ours"

include_flags() { local dir; for dir in $1; do printf -- '-I%s ' "$dir"; done; }
ENGINES=(ours)
if [ -n "${BASE_LIB:-}" ]; then
  mkdir "$WORK/base"
  cp "$BASE_LIB/libdeepseek.so" "$WORK/base/"
  ln -s libdeepseek.so "$WORK/base/libdeepseek.so.0"
  cc -std=c11 -O2 -Iinclude bench/suite.c -o "$WORK/suite-base" -L"$WORK/base" -ldeepseek -Wl,-rpath,"$WORK/base"
  ENGINES+=(base)
fi
if [ -z "${NO_UPSTREAM:-}" ]; then
  if [ ! -e "$LLAMA_LIB/libllama.so" ]; then echo "no libllama.so in $LLAMA_LIB (set LLAMA_LIB)" >&2; exit 1; fi
  if [ -z "${LLAMA_INC:-}" ]; then
    # (llama.cpp's own tree: an ik_llama.cpp source under /work/ref has a llama.h too)
    LLAMA_INC="$(dirname "$(find /work/ref -name llama.h -path '*include*' -not -path '*ik_llama*' | head -1)") $(dirname "$(find /work/ref -name ggml.h -path '*ggml/include*' -not -path '*ik_llama*' | head -1)")"
  fi
  # shellcheck disable=SC2046 # one -I per directory
  cc -std=c11 -O2 $(include_flags "$LLAMA_INC") bench/suite.c -o "$WORK/suite-upstream" -L"$LLAMA_LIB" -lllama -Wl,-rpath,"$(realpath "$LLAMA_LIB")"
  ENGINES+=(upstream)
fi

if [ -n "${IK_LLAMA_LIB:-}" ] || [ -n "${IK_LLAMA_INC:-}" ]; then
  if [ -z "${IK_LLAMA_LIB:-}" ] || [ -z "${IK_LLAMA_INC:-}" ]; then
    echo "ik_llama.cpp skipped: set both IK_LLAMA_LIB and IK_LLAMA_INC" >&2
  # shellcheck disable=SC2046
  elif cc -std=c11 -O2 -DSUITE_OLD_API $(include_flags "$IK_LLAMA_INC") bench/suite.c -o "$WORK/suite-ik" -L"$IK_LLAMA_LIB" -lllama \
         -Wl,-rpath,"$(realpath "$IK_LLAMA_LIB")" 2> "$WORK/ik-build.log"; then
    ENGINES+=(ik)
  else
    echo "ik_llama.cpp skipped: bench/suite.c does not build against its headers:" >&2
    head -20 "$WORK/ik-build.log" >&2
  fi
fi
cc -std=c11 -O2 -march=native -pthread bench/bandwidth.c -o "$WORK/bandwidth"

COMMIT="$(git rev-parse --short HEAD)"
git diff --quiet HEAD -- || COMMIT="$COMMIT-dirty"
LOAD_START="$(cut -d' ' -f1-3 /proc/loadavg)"
DATE="$(date '+%Y-%m-%d %H:%M')"
RECORDS="$WORK/records"
: > "$RECORDS"

run_suite() { # engine model threads: suite.c's line, or exit naming the failed run
  "$WORK/suite-$1" "$2" "$3" "${SIZES[@]}" || { echo "$1 failed on $2 with $3 threads" >&2; exit 1; }
}

for index in "${!MODELS[@]}"; do
  model="${MODELS[$index]}"
  warmup_threads="${THREADS%% *}"
  # the first run of each engine pays for reading the model file into the page cache
  for engine in "${ENGINES[@]}"; do run_suite "$engine" "$model" "$warmup_threads" > /dev/null; done
  for threads in $THREADS; do
    echo "$(basename "$model"), threads=$threads: rounds of a bandwidth probe and ${ENGINES[*]}: $PAIRS" >&2
    for pair in $(seq "$PAIRS"); do
      probe="$("$WORK/bandwidth" "$threads")"
      echo "kind=probe model=$index $probe" >> "$RECORDS"
      for engine in "${ENGINES[@]}"; do
        line="$(run_suite "$engine" "$model" "$threads")"
        echo "kind=run engine=$engine model=$index pair=$pair $line" >> "$RECORDS"
      done
    done
  done
done

mkdir -p bench/results
REPORT="bench/results/$(date -d "$DATE" '+%Y-%m-%d-%H%M').md"
REPORT_DATE="$DATE" REPORT_COMMIT="$COMMIT" REPORT_LOAD_START="$LOAD_START" REPORT_COMMAND="$COMMAND" \
  REPORT_ENGINES="${ENGINES[*]}" python3 bench/report.py "$RECORDS" "${MODELS[@]}" > "$REPORT"
cat "$REPORT"
echo "written to $REPORT" >&2
