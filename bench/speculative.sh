#!/usr/bin/env bash
# Speculative decoding as upstream's own llama-speculative drives it (a target and a draft
# context; the draft proposes up to DRAFT tokens, the target verifies them in one batch) against
# plain greedy decoding of the same prompt (upstream's llama-completion), each run on llama.cpp
# b11312's libllama.so and on ours (LD_PRELOAD), fresh processes alternating
# (ours plain, ours speculative, upstream plain, upstream speculative) PAIRS times: target
# Qwen2.5-Coder 1.5B, draft 0.5B (Q4_K_M), greedy. Reports decode tokens/s (each program's own
# timing of its generation loop, prompt excluded), the draft's acceptance, the speed-up over
# plain decoding on the same library, and whether every run produced the same text. Writes
# bench/results/YYYY-MM-DD-HHMM-speculative.md with the CPU's flags. Wall-clock numbers: run it
# on a quiet machine.
# Usage: bench/speculative.sh [PAIRS=3]
# Environment: THREADS=2, N_PREDICT=128, DRAFT=8 (--spec-draft-n-max), UPSTREAM_BIN=/work/ref/build/bin
#   (llama-speculative and llama-completion with their libllama.so), OURS_LIB=DIR (a built
#   libdeepseek.so instead of target/release's), PROMPT (default: a Python function to complete)
set -euo pipefail
cd "$(dirname "$0")/.."
PAIRS="${1:-3}"
[[ "$PAIRS" =~ ^[1-9][0-9]*$ ]] || { echo "PAIRS must be a positive whole number" >&2; exit 2; }
MODEL_DIR="${DEEPSEEK_MODELS:-$HOME/.cache/deepseek/models}"
TARGET="$MODEL_DIR/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
DRAFT_MODEL="$MODEL_DIR/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
for m in "$TARGET" "$DRAFT_MODEL"; do
  [ -f "$m" ] || { echo "model $m not found; scripts/fetch-models.sh qwen05 qwen15 fetches it" >&2; exit 1; }
done
THREADS="${THREADS:-2}"
N_PREDICT="${N_PREDICT:-128}"
DRAFT="${DRAFT:-8}"
BIN="${UPSTREAM_BIN:-/work/ref/build/bin}"
for p in llama-speculative llama-completion; do
  [ -x "$BIN/$p" ] || { echo "no $BIN/$p (build llama.cpp b11312's targets llama-speculative llama-completion; set UPSTREAM_BIN)" >&2; exit 1; }
done
PROMPT="${PROMPT:-# Python: merge sort and binary search over a sorted list, with docstrings and type hints
from typing import List


def merge_sort(items: List[int]) -> List[int]:
}"

WORK="$(mktemp -d)"
trap '[ -n "${KEEP:-}" ] || rm -rf "$WORK"' EXIT
if [ -n "${OURS_LIB:-}" ]; then SRC="$OURS_LIB"; else cargo build -q --release --lib; SRC="${CARGO_TARGET_DIR:-target}/release"; fi
cp "$SRC/libdeepseek.so" "$WORK/libdeepseek.so"
OURS="$WORK/libdeepseek.so"

COMMON=(-t "$THREADS" -tb "$THREADS" -c 2048 -n "$N_PREDICT" --temp 0 --top-k 1 -s 1 -p "$PROMPT")
run() { # engine mode i -> prints "tok/s accept%"
  local engine=$1 mode=$2 i=$3 pre=()
  [ "$engine" = ours ] && pre=(env LD_PRELOAD="$OURS")
  local out="$WORK/$engine-$mode-$i"
  if [ "$mode" = spec ]; then
    "${pre[@]}" "$BIN/llama-speculative" -m "$TARGET" -md "$DRAFT_MODEL" --spec-draft-n-max "$DRAFT" --spec-draft-n-min 1 "${COMMON[@]}" > "$out.txt" 2> "$out.log"
    local tps acc
    tps=$(sed -n 's/.*decoded *[0-9]* tokens in *[0-9.]* seconds, speed: *\([0-9.]*\) t\/s.*/\1/p' "$out.log" | head -1)
    acc=$(sed -n 's/^.*accept *= *\([0-9.]*\)%.*/\1/p' "$out.log" | head -1)
    echo "$tps $acc"
  else
    "${pre[@]}" "$BIN/llama-completion" -m "$TARGET" -no-cnv --no-display-prompt "${COMMON[@]}" > "$out.txt" 2> "$out.log" < /dev/null
    local tps
    tps=$(sed -n 's/.*eval time = .* runs *( *[0-9.]* ms per token, *\([0-9.]*\) tokens per second).*/\1/p' "$out.log" | grep -v '^$' | tail -1)
    echo "$tps -"
  fi
}
declare -A S
for i in $(seq 0 "$PAIRS"); do # run 0 is the warm-up
  for engine in ours upstream; do
    for mode in plain spec; do
      r=$(run "$engine" "$mode" "$i")
      [ "$i" -gt 0 ] && S[$engine-$mode]+="$r;"
      echo "run $i $engine $mode: $r" >&2
    done
  done
done
# the generated text of each run (speculative prints the prompt first; compare from the first
# line the plain run generated)
texts=$(for f in "$WORK"/*-[1-9]*.txt; do tail -c 300 "$f" | md5sum; done | sort -u | wc -l)

STAMP=$(date -u +%Y-%m-%d-%H%M)
OUT="bench/results/$STAMP-speculative.md"
LEVEL=$(bench/kernel_level.sh "$OURS")
python3 - "$OUT" "$PAIRS" "$texts" "$THREADS" "$N_PREDICT" "$DRAFT" "${S[ours-plain]}" "${S[ours-spec]}" "${S[upstream-plain]}" "${S[upstream-spec]}" "$LEVEL" "$(git rev-parse --short HEAD)" <<'PY'
import sys, statistics, platform, subprocess
out, pairs, texts, threads, n, draft = sys.argv[1:7]
runs = [[tuple(x.split()) for x in s.split(';') if x] for s in sys.argv[7:11]]
level, commit = sys.argv[11], sys.argv[12]
def med(rs, k=0):
    v = [float(r[k]) for r in rs if r[k] not in ('', '-')]
    return statistics.median(v) if v else float('nan')
flags = [l for l in open('/proc/cpuinfo') if l.startswith('flags')][0].split()
isa = ' '.join(f for f in flags if f.startswith(('avx', 'fma', 'f16c', 'gfni')) )
model = [l.split(':', 1)[1].strip() for l in open('/proc/cpuinfo') if l.startswith('model name')][0]
names = ['ours plain', 'ours speculative', 'llama.cpp plain', 'llama.cpp speculative']
lines = [f"# Speculative decoding: llama-speculative vs llama-completion, 1.5B target + 0.5B draft",
         "", f"CPU: {model}, {threads} threads; flags: {isa}; commit {commit}", level, f"Generation: {n} tokens greedy, --spec-draft-n-max {draft}; {pairs} alternating rounds after a warm-up; decode tok/s by each program's own timing",
         "", "| engine | runs (tok/s) | median | draft acceptance |", "|---|---|---|---|"]
for name, rs in zip(names, runs):
    acc = '' if 'plain' in name else f"{med(rs, 1):.1f}%"
    lines.append(f"| {name} | {', '.join(r[0] for r in rs)} | {med(rs):.2f} | {acc} |")
lines += ["", f"Speed-up of speculative over plain decoding: ours {med(runs[1]) / med(runs[0]):.2f}x, llama.cpp {med(runs[3]) / med(runs[2]):.2f}x",
          f"Ours against llama.cpp: plain {med(runs[0]) / med(runs[2]):.2f}x, speculative {med(runs[1]) / med(runs[3]):.2f}x",
          f"Distinct generated texts over all measured runs (last 300 bytes): {texts}"]
open(out, 'w').write('\n'.join(lines) + '\n')
print('\n'.join(lines))
PY
