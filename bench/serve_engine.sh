#!/usr/bin/env bash
# The serving benchmark of the serving-engine issue (run as bench/serve.sh was then): bench/serve.c's closed-loop C clients
# against deepseek's ds_engine and against a llama.h serving loop (what llama-server does) on
# upstream llama.cpp's libllama.so (and on libdeepseek), fresh processes alternating, ROUNDS
# rounds per setting; medians. Settings: 1, 4, 8 and 16 clients (N_PROMPT-token prompts,
# N_GEN tokens each, REQUESTS per client), and 8 clients streaming 256 tokens while one
# 2,000-token prompt arrives. Writes bench/results/YYYY-MM-DD-HHMM-serve.md and prints it.
# Usage: bench/serve_engine.sh [ROUNDS=3] [MODEL.gguf...]   (default: Qwen2.5-Coder 0.5B and 1.5B Q4_K_M)
# Environment: THREADS=2 CLIENTS="1 4 8 16" N_PROMPT=128 N_GEN=64 REQUESTS=2 LONG=2000
#   LLAMA_LIB=DIR (default /work/ref/build/bin), LLAMA_INC="DIR..." (default: under /work/ref)
#   OURS_LIB=DIR  a built libdeepseek.so to test instead of target/release's
set -euo pipefail
COMMAND="$0 $*"
cd "$(dirname "$0")/.."
ROUNDS="${1:-3}"
if [ $# -gt 0 ]; then shift; fi
MODEL_DIR="${DEEPSEEK_MODELS:-$HOME/.cache/deepseek/models}"
if [ $# -gt 0 ]; then MODELS=("$@"); else MODELS=("$MODEL_DIR/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf" "$MODEL_DIR/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"); fi
for m in "${MODELS[@]}"; do [ -f "$m" ] || { echo "model $m not found (scripts/fetch-models.sh qwen05 qwen15)" >&2; exit 1; }; done
THREADS="${THREADS:-2}"; CLIENTS="${CLIENTS:-1 4 8 16}"; N_PROMPT="${N_PROMPT:-128}"; N_GEN="${N_GEN:-64}"; REQUESTS="${REQUESTS:-2}"; LONG="${LONG:-2000}"
LLAMA_LIB="${LLAMA_LIB:-/work/ref/build/bin}"
if [ -z "${LLAMA_INC:-}" ]; then
  LLAMA_INC="$(dirname "$(find /work/ref -name llama.h -path '*include*' | head -1)") $(dirname "$(find /work/ref -name ggml.h -path '*ggml/include*' | head -1)")"
fi
[ -e "$LLAMA_LIB/libllama.so" ] || { echo "no libllama.so in $LLAMA_LIB (set LLAMA_LIB)" >&2; exit 1; }
WORK="$(mktemp -d)"; trap 'rm -rf "$WORK"' EXIT
if [ -z "${OURS_LIB:-}" ]; then cargo build -q --release --lib; OURS_LIB=target/release; fi
mkdir "$WORK/ours"; cp "$OURS_LIB/libdeepseek.so" "$WORK/ours/"; ln -s libdeepseek.so "$WORK/ours/libdeepseek.so.0"
KERNELS="$(bench/kernel_level.sh "$WORK/ours/libdeepseek.so")"
cc -std=c11 -O2 -DSERVE_DS_ENGINE -Iinclude bench/serve.c -o "$WORK/engine" -L"$WORK/ours" -ldeepseek -lpthread -Wl,-rpath,"$WORK/ours"
cc -std=c11 -O2 -Iinclude bench/serve.c -o "$WORK/loop-ours" -L"$WORK/ours" -ldeepseek -lpthread -Wl,-rpath,"$WORK/ours"
inc=(); for d in $LLAMA_INC; do inc+=("-I$d"); done
cc -std=c11 -O2 "${inc[@]}" bench/serve.c -o "$WORK/loop-llama" -L"$LLAMA_LIB" -lllama -lpthread -Wl,-rpath,"$(realpath "$LLAMA_LIB")"
COMMIT="$(git rev-parse --short HEAD)"; git diff --quiet HEAD -- || COMMIT="$COMMIT-dirty"
DATE="$(date '+%Y-%m-%d %H:%M')"; LOAD="$(cut -d' ' -f1-3 /proc/loadavg)"
REC="$WORK/records"; : > "$REC"
ENGINES=(engine loop-llama loop-ours)
for mi in "${!MODELS[@]}"; do
  m="${MODELS[$mi]}"
  for e in "${ENGINES[@]}"; do "$WORK/$e" "$m" "$THREADS" 1 16 4 1 > /dev/null; done  # page cache
  for c in $CLIENTS; do
    echo "$(basename "$m"): $c clients, $ROUNDS rounds" >&2
    for r in $(seq "$ROUNDS"); do for e in "${ENGINES[@]}"; do
      echo "model=$mi engine=$e scenario=closed $("$WORK/$e" "$m" "$THREADS" "$c" "$N_PROMPT" "$N_GEN" "$REQUESTS")" >> "$REC"
    done; done
  done
  echo "$(basename "$m"): 8 clients with a $LONG-token prompt arriving, $ROUNDS rounds" >&2
  for r in $(seq "$ROUNDS"); do for e in "${ENGINES[@]}"; do
    echo "model=$mi engine=$e scenario=long $("$WORK/$e" "$m" "$THREADS" 8 "$N_PROMPT" 256 1 "$LONG")" >> "$REC"
  done; done
done
mkdir -p bench/results
OUT="bench/results/$(date -d "$DATE" '+%Y-%m-%d-%H%M')-serve-engine.md"
python3 - "$REC" "${MODELS[@]}" > "$OUT" <<PY
import sys, statistics, platform
recs = [dict(kv.split("=", 1) for kv in line.split()) for line in open(sys.argv[1]) if line.strip()]
models = sys.argv[2:]
flags = next((l.split(":", 1)[1].split() for l in open("/proc/cpuinfo") if l.startswith("flags")), [])
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
isa = " ".join(f for f in flags if f.startswith(("avx", "fma", "f16c", "gfni", "vnni")) or f in ("avx512_vnni", "avx_vnni"))
print(f"# Serving benchmark, $DATE\n")
print(f"- commit \`$COMMIT\`, command \`$COMMAND\`")
print(f"- CPU: {cpu}, {len([l for l in open('/proc/cpuinfo') if l.startswith('processor')])} cores; ISA flags: {isa}")
print("$KERNELS")
print(f"- load average at start: $LOAD; threads $THREADS; $ROUNDS rounds of fresh processes, engines alternating; medians (min–max)")
print("- engines: **ds_engine** (deepseek's serving engine, default parameters), **llama.cpp loop** (bench/serve.c's llama.h serving loop, one batch per step with whole prompts, as llama-server; upstream b11312 libllama.so), **our loop** (the same loop on libdeepseek)")
print("- closed loop: each client submits a $N_PROMPT-token prompt, $N_GEN tokens generated ($REQUESTS requests per client); long: 8 clients stream 256 tokens, one $LONG-token prompt arrives once all have 8 tokens. Latencies are taken where each engine emits a token.\n")
def med(rs, k):
    v = [float(r[k]) for r in rs]
    return statistics.median(v), min(v), max(v)
names = {"engine": "ds_engine", "loop-llama": "llama.cpp loop", "loop-ours": "our loop"}
for mi, m in enumerate(models):
    print(f"## {m.split('/')[-1]}\n")
    print("| clients | engine | tokens/s | vs llama.cpp loop | TTFT P50 ms | TTFT P99 ms | ITL P50 ms | ITL P99 ms | ITL max ms |")
    print("|---|---|---|---|---|---|---|---|---|")
    for c in sorted({int(r["clients"]) for r in recs if r["model"] == str(mi) and r["scenario"] == "closed"}):
        base = [r for r in recs if r["model"] == str(mi) and r["scenario"] == "closed" and r["clients"] == str(c) and r["engine"] == "loop-llama"]
        b = med(base, "tok_s")[0] if base else None
        for e in ("engine", "loop-llama", "loop-ours"):
            rs = [r for r in recs if r["model"] == str(mi) and r["scenario"] == "closed" and r["clients"] == str(c) and r["engine"] == e]
            if not rs: continue
            t = med(rs, "tok_s")
            ratio = f"{t[0] / b:.2f}x" if b else "-"
            print(f"| {c} | {names[e]} | {t[0]:.1f} ({t[1]:.1f}–{t[2]:.1f}) | {ratio} | {med(rs,'ttft_p50_ms')[0]:.0f} | {med(rs,'ttft_p99_ms')[0]:.0f} | {med(rs,'itl_p50_ms')[0]:.1f} | {med(rs,'itl_p99_ms')[0]:.1f} | {med(rs,'itl_max_ms')[0]:.0f} |")
    print("\n8 clients streaming, one long prompt arriving:\n")
    print("| engine | tokens/s | ITL P50 ms | ITL P99 ms | P99 / P50 | ITL max ms | long prompt's TTFT ms |")
    print("|---|---|---|---|---|---|---|")
    for e in ("engine", "loop-llama", "loop-ours"):
        rs = [r for r in recs if r["model"] == str(mi) and r["scenario"] == "long" and r["engine"] == e]
        if not rs: continue
        p50, p99 = med(rs, "itl_p50_ms")[0], med(rs, "itl_p99_ms")[0]
        print(f"| {names[e]} | {med(rs,'tok_s')[0]:.1f} | {p50:.1f} | {p99:.1f} | {p99 / p50:.2f} | {med(rs,'itl_max_ms')[0]:.0f} | {med(rs,'long_ttft_ms')[0]:.0f} |")
    print()
print("Raw records:\n\n\`\`\`")
for line in open(sys.argv[1]): print(line.rstrip())
print("\`\`\`")
PY
cat "$OUT"; echo "written to $OUT" >&2
