#!/usr/bin/env bash
# Upstream's own llama-bench, one program and two libraries: llama.cpp b11312's llama-bench run on
# its libllama.so and on ours (LD_PRELOAD), alternating (deepseek, llama.cpp, [ik_llama.cpp], ...)
# PAIRS times per model: pp512, tg128, and pp/tg at depth 4096 (`-d 4096`). ik_llama.cpp's own
# llama-bench runs as a third engine where built (IK_BENCH), weights repacked at load (`-rtr 1`,
# its fastest CPU setting). Writes bench/results/YYYY-MM-DD-HHMM-llama-bench.md with the CPU's
# flags, the kernel level ours ran at, every sample, the medians and the per-pair ratios; prints it.
# Wall-clock numbers: run it on a quiet machine.
# Usage: bench/llama-bench.sh [PAIRS=3] [MODEL.gguf...]
#   default models: Qwen2.5-Coder 0.5B and 1.5B Q4_K_M from scripts/fetch-models.sh's cache
# Environment:
#   THREADS=2          thread count (-t)
#   LLAMA_BENCH=PATH   upstream's llama-bench (default /work/ref/build/bin/llama-bench; its
#                      libllama.so beside it)
#   IK_BENCH=PATH      ik_llama.cpp's llama-bench (a third engine), unset: left out
#   OURS_LIB=DIR       test the libdeepseek.so in DIR instead of building target/release's
#   DEPTH=4096         the depth of the depth runs (0: leave them out)
#   TESTS="pp tg"      which of pp512 / tg128 to run (the depth runs follow the same choice)
set -euo pipefail
cd "$(dirname "$0")/.."

PAIRS="${1:-3}"
if [ $# -gt 0 ]; then shift; fi
if ! [[ "$PAIRS" =~ ^[1-9][0-9]*$ ]]; then echo "PAIRS must be a positive whole number, not '$PAIRS'" >&2; exit 2; fi
MODEL_DIR="${DEEPSEEK_MODELS:-$HOME/.cache/deepseek/models}"
if [ $# -gt 0 ]; then
  MODELS=("$@")
else
  MODELS=("$MODEL_DIR/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf" "$MODEL_DIR/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf")
fi
for model in "${MODELS[@]}"; do
  [ -f "$model" ] || { echo "model $model not found; scripts/fetch-models.sh qwen05 qwen15 fetches the default ones" >&2; exit 1; }
done
THREADS="${THREADS:-2}"
DEPTH="${DEPTH:-4096}"
TESTS="${TESTS:-pp tg}"
LLAMA_BENCH="${LLAMA_BENCH:-/work/ref/build/bin/llama-bench}"
[ -x "$LLAMA_BENCH" ] || { echo "no llama-bench at $LLAMA_BENCH (set LLAMA_BENCH)" >&2; exit 1; }
if [ -n "${IK_BENCH:-}" ] && [ ! -x "$IK_BENCH" ]; then echo "IK_BENCH=$IK_BENCH is not executable" >&2; exit 1; fi

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
if [ -n "${OURS_LIB:-}" ]; then
  OURS_SRC="$OURS_LIB"
else
  cargo build -q --release --lib
  OURS_SRC="${CARGO_TARGET_DIR:-target}/release"
fi
# a copy, so rebuilding during the run does not change what is measured
cp "$OURS_SRC/libdeepseek.so" "$WORK/libdeepseek.so"

# the calls must bind to our library, not to the libllama.so llama-bench was linked with
# (LD_BIND_NOW: with lazy binding `--help` exits before its first llama_* call binds)
# (the output captured first: under pipefail, `grep -q` leaving early would fail the pipeline)
BINDINGS="$(LD_BIND_NOW=1 LD_DEBUG=bindings LD_PRELOAD="$WORK/libdeepseek.so" "$LLAMA_BENCH" --help 2>&1 >/dev/null || true)"
if ! grep -q "binding file [^ ]*llama-bench[^ ]* .* to $WORK/libdeepseek.so .*llama_backend_init" <<< "$BINDINGS"; then
  echo "warning: could not confirm with LD_DEBUG=bindings that llama-bench binds llama_backend_init to our library" >&2
fi

ARGS=()
for t in $TESTS; do
  case $t in
    pp) ARGS+=(-p 512) ;;
    tg) ARGS+=(-n 128) ;;
    *) echo "TESTS: pp or tg, not '$t'" >&2; exit 2 ;;
  esac
done
has() { [[ " $TESTS " == *" $1 "* ]]; }
# the depth runs: a shorter pp and tg after DEPTH tokens of context
DARGS=(-d "$DEPTH")
has pp && DARGS+=(-p 512) || DARGS+=(-p 0)
has tg && DARGS+=(-n 64) || DARGS+=(-n 0)
has pp || ARGS+=(-p 0)
has tg || ARGS+=(-n 0)

ENGINES=(deepseek llama.cpp)
[ -n "${IK_BENCH:-}" ] && ENGINES+=(ik_llama.cpp)
RECORDS="$WORK/records.tsv"
: > "$RECORDS"
KERNELS="$(bench/kernel_level.sh "$WORK/libdeepseek.so")"

run_engine() { # engine model depth_args... -> "test<TAB>t/s" lines
  local engine=$1 model=$2; shift 2
  local out
  case $engine in
    deepseek) out="$(LD_PRELOAD="$WORK/libdeepseek.so" "$LLAMA_BENCH" -m "$model" -t "$THREADS" -r 1 -o csv "$@" 2>/dev/null)" ;;
    llama.cpp) out="$("$LLAMA_BENCH" -m "$model" -t "$THREADS" -r 1 -o csv "$@" 2>/dev/null)" ;;
    ik_llama.cpp) out="$("$IK_BENCH" -m "$model" -t "$THREADS" -r 1 -rtr 1 -o csv "$@" 2>/dev/null)" ;;
  esac
  python3 - "$out" <<'PY'
import csv, io, sys
rows = list(csv.DictReader(io.StringIO(sys.argv[1])))
for r in rows:
    p, g, d = int(r["n_prompt"]), int(r["n_gen"]), int(r.get("n_depth", 0) or 0)
    name = (f"pp{p}" if p else f"tg{g}") + (f" @ d{d}" if d else "")
    print(f"{name}\t{float(r['avg_ts']):.3f}")
PY
}

START="$(date -u +%Y-%m-%d-%H%M)"
LOAD_START="$(cut -d' ' -f1-3 /proc/loadavg)"
for mi in "${!MODELS[@]}"; do
  model="${MODELS[$mi]}"
  for pair in $(seq "$PAIRS"); do
    for engine in "${ENGINES[@]}"; do
      for args in "ARGS" "DARGS"; do
        [ "$args" = DARGS ] && [ "$DEPTH" = 0 ] && continue
        declare -n a=$args
        while IFS=$'\t' read -r test ts; do
          printf '%s\t%s\t%s\t%s\t%s\n' "$mi" "$pair" "$engine" "$test" "$ts" >> "$RECORDS"
          echo "model $mi pair $pair $engine: $test $ts t/s" >&2
        done < <(run_engine "$engine" "$model" "${a[@]}")
        unset -n a
      done
    done
  done
done

mkdir -p bench/results
REPORT="bench/results/${START}-llama-bench.md"
# how upstream was built (its CMake cache beside bin/): an AVX2-only build of it on an AVX-512
# machine is a proxy for an AVX2 CPU, and the report must say so
UPSTREAM_BUILD=""
CACHE="$(dirname "$LLAMA_BENCH")/../CMakeCache.txt"
if [ -f "$CACHE" ]; then
  UPSTREAM_BUILD=" (build $(grep -E '^GGML_(NATIVE|AVX2|AVX512):' "$CACHE" | sed 's/:BOOL//' | tr '\n' ' ' | sed 's/ $//'))"
fi
python3 - "$RECORDS" "$START" "$(git rev-parse --short HEAD)$(git diff --quiet || echo '+dirty')" "$LOAD_START $(cut -d' ' -f1-3 /proc/loadavg)" "$THREADS" "$KERNELS" "$(basename "$LLAMA_BENCH")$UPSTREAM_BUILD" "${IK_BENCH:-}" "${MODELS[@]}" > "$REPORT" <<'PY'
import statistics, sys
records, start, commit, load, threads, kernels, bench, ik = sys.argv[1:9]
models = sys.argv[9:]
flags_of_interest = ["avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16", "avx_vnni", "gfni"]
model_name, flags = "unknown", set()
for line in open("/proc/cpuinfo"):
    k, _, v = line.partition(":")
    if k.strip() == "model name" and model_name == "unknown":
        model_name = v.strip()
    if k.strip() == "flags" and not flags:
        flags = set(v.split())
rows = [l.rstrip("\n").split("\t") for l in open(records) if l.strip()]
engines = []
for r in rows:
    if r[2] not in engines:
        engines.append(r[2])
print(f"# llama-bench: deepseek (LD_PRELOAD) vs llama.cpp b11312{' vs ik_llama.cpp (-rtr 1)' if ik else ''} — {start} UTC\n")
print(f"- CPU: {model_name}; flags: {' '.join(f for f in flags_of_interest if f in flags)}; {threads} threads")
print(kernels)
print(f"- commit {commit}; load average at start / end: {load}")
print(f"- upstream: {bench}")
print(f"- harness: upstream's `llama-bench` (-r 1 per sample), fresh processes alternating engines per pair; medians; ratio = median of per-pair ratios\n")
for mi, m in enumerate(models):
    print(f"## {m.split('/')[-1]}\n")
    tests = []
    for r in rows:
        if int(r[0]) == mi and r[3] not in tests:
            tests.append(r[3])
    head = "| test | " + " | ".join(f"{e} t/s (min–median–max)" for e in engines) + " | " + " | ".join(f"deepseek / {e}" for e in engines[1:]) + " |"
    print(head)
    print("|" + "---|" * (1 + 2 * len(engines) - 1))
    for t in tests:
        vals = {e: {int(r[1]): float(r[4]) for r in rows if int(r[0]) == mi and r[2] == e and r[3] == t} for e in engines}
        cells = []
        for e in engines:
            v = sorted(vals[e].values())
            cells.append(f"{v[0]:.2f}–{statistics.median(v):.2f}–{v[-1]:.2f}" if v else "—")
        ratios = []
        for e in engines[1:]:
            rs = [vals["deepseek"][p] / vals[e][p] for p in vals["deepseek"] if p in vals[e] and vals[e][p] > 0]
            ratios.append(f"**{statistics.median(rs):.2f}×**" if rs else "—")
        print(f"| {t} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
    print()
print("Raw samples (model, pair, engine, test, t/s):\n")
print("```")
for r in rows:
    print("\t".join(r))
print("```")
PY
cat "$REPORT"
echo "report: $REPORT" >&2
