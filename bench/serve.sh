#!/usr/bin/env bash
# The server benchmark: the same closed-loop streaming load (deepseek-loadgen: C concurrent
# clients, REQUESTS streaming /v1/completions requests each, prompts of about N_PROMPT tokens of
# English words, different for every request, N_GEN tokens each with ignore_eos) against deepseek-server and against
# llama.cpp b11312's llama-server, both started with the same -np C, -c C×CTX_SLOT, -t THREADS,
# -b 2048 -ub 512; a fresh server per run, the two alternating (and which goes first too),
# ROUNDS rounds; medians. Writes bench/results/YYYY-MM-DD-HHMM-serve.md and prints it.
# (The engine's own C benchmark is bench/serve_engine.sh.)
# Usage: bench/serve.sh [ROUNDS=3] [MODEL.gguf...]   (default: Qwen2.5-Coder 0.5B and 1.5B Q4_K_M)
# Environment: THREADS=2 CLIENTS="1 4 8 16" N_PROMPT=128 N_GEN=64 REQUESTS=2 CTX_SLOT=1024
#   LLAMA_SERVER=PATH (default /work/ref/build/bin/llama-server)
set -euo pipefail
COMMAND="$0 $*"
cd "$(dirname "$0")/.."
ROUNDS="${1:-3}"
if [ $# -gt 0 ]; then shift; fi
MODEL_DIR="${DEEPSEEK_MODELS:-$HOME/.cache/deepseek/models}"
if [ $# -gt 0 ]; then MODELS=("$@"); else MODELS=("$MODEL_DIR/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf" "$MODEL_DIR/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"); fi
for m in "${MODELS[@]}"; do [ -f "$m" ] || { echo "model $m not found (scripts/fetch-models.sh qwen05 qwen15)" >&2; exit 1; }; done
THREADS="${THREADS:-2}"; CLIENTS="${CLIENTS:-1 4 8 16}"; N_PROMPT="${N_PROMPT:-128}"; N_GEN="${N_GEN:-64}"; REQUESTS="${REQUESTS:-2}"; CTX_SLOT="${CTX_SLOT:-1024}"
LLAMA_SERVER="${LLAMA_SERVER:-/work/ref/build/bin/llama-server}"
[ -x "$LLAMA_SERVER" ] || { echo "no llama-server at $LLAMA_SERVER (set LLAMA_SERVER)" >&2; exit 1; }
cargo build -q --release -p deepseek-server
cargo build -q --release --lib  # for bench/kernel_level.sh: the level the server's kernels run at
KERNELS="$(bench/kernel_level.sh)"
OURS=target/release/deepseek-server; LOADGEN=target/release/deepseek-loadgen
WORK="$(mktemp -d)"; PID=""
cleanup() { [ -n "$PID" ] && kill "$PID" 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT
COMMIT="$(git rev-parse --short HEAD)"; git diff --quiet HEAD -- || COMMIT="$COMMIT-dirty"
DATE="$(date '+%Y-%m-%d %H:%M')"; LOAD="$(cut -d' ' -f1-3 /proc/loadavg)"
LLAMA_VERSION="$("$LLAMA_SERVER" --version 2>&1 | grep -m1 -i version || true)"
PORT=18080
REC="$WORK/records"; : > "$REC"

# start SERVER MODEL NP: a server on $PORT, waits until /health answers 200.
start() {
  local bin log="$WORK/server.log"
  if [ "$1" = ours ]; then bin="$OURS"; else bin="$LLAMA_SERVER"; fi
  "$bin" -m "$2" --host 127.0.0.1 --port "$PORT" -np "$3" -c $(( $3 * CTX_SLOT )) -t "$THREADS" -b 2048 -ub 512 > "$log" 2>&1 &
  PID=$!
  for _ in $(seq 600); do
    if curl -sf "http://127.0.0.1:$PORT/health" > /dev/null 2>&1; then return 0; fi
    kill -0 "$PID" 2>/dev/null || { cat "$log" >&2; return 1; }
    sleep 0.1
  done
  echo "$1 did not become ready" >&2; cat "$log" >&2; return 1
}
stop() { kill -TERM "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; PID=""; }

for mi in "${!MODELS[@]}"; do
  m="${MODELS[$mi]}"
  for c in $CLIENTS; do
    echo "$(basename "$m"): $c clients, $ROUNDS rounds" >&2
    for r in $(seq "$ROUNDS"); do
      if [ $((r % 2)) -eq 1 ]; then order="ours llama"; else order="llama ours"; fi
      for s in $order; do
        start "$s" "$m" "$c"
        # One short request first: the first decode of a process pays for page faults.
        "$LOADGEN" --url "http://127.0.0.1:$PORT" --clients 1 --requests 1 --prompt-tokens 16 --max-tokens 4 > /dev/null
        echo "model=$mi server=$s $("$LOADGEN" --url "http://127.0.0.1:$PORT" --clients "$c" --requests "$REQUESTS" --prompt-tokens "$N_PROMPT" --max-tokens "$N_GEN")" >> "$REC"
        stop
      done
    done
  done
done
mkdir -p bench/results
OUT="bench/results/$(date -d "$DATE" '+%Y-%m-%d-%H%M')-serve.md"
python3 - "$REC" "${MODELS[@]}" > "$OUT" <<PY
import sys, statistics
recs = [dict(kv.split("=", 1) for kv in line.split()) for line in open(sys.argv[1]) if line.strip()]
models = sys.argv[2:]
flags = next((l.split(":", 1)[1].split() for l in open("/proc/cpuinfo") if l.startswith("flags")), [])
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
isa = " ".join(f for f in flags if f.startswith(("avx", "fma", "f16c", "gfni")) or "vnni" in f)
print(f"# Server benchmark, $DATE\n")
print(f"- commit \`$COMMIT\`, command \`$COMMAND\`")
print(f"- CPU: {cpu}, $(nproc) cores; flags: {isa}")
print("$KERNELS")
print(f"- load average before: $LOAD")
print(f"- llama-server: $LLAMA_SERVER ($LLAMA_VERSION)")
print(f"- both servers: -np C -c C×$CTX_SLOT -t $THREADS -b 2048 -ub 512, a fresh process per run, alternating; "
      f"deepseek-loadgen: C clients × $REQUESTS streaming /v1/completions requests, prompts of ~$N_PROMPT tokens of English words (distinct), "
      f"$N_GEN tokens each (ignore_eos), temperature 0.8; medians of $ROUNDS rounds\n")
print("| model | clients | deepseek-server tok/s | llama-server tok/s | ratio | TTFT P50 / P99 ms, ours | TTFT P50 / P99 ms, llama-server | ITL P50 / P99 ms, ours | ITL P50 / P99 ms, llama-server | errors ours / llama |")
print("|---|---|---|---|---|---|---|---|---|---|")
med = lambda rs, k: statistics.median(float(r[k]) for r in rs)
for mi, m in enumerate(models):
    name = m.rsplit("/", 1)[-1].replace(".gguf", "")
    for c in sorted({int(r["clients"]) for r in recs if r["model"] == str(mi)}):
        o = [r for r in recs if r["model"] == str(mi) and int(r["clients"]) == c and r["server"] == "ours"]
        l = [r for r in recs if r["model"] == str(mi) and int(r["clients"]) == c and r["server"] == "llama"]
        to, tl = med(o, "tok_s"), med(l, "tok_s")
        err = lambda rs: sum(int(r["errors"]) for r in rs)
        print(f"| {name} | {c} | {to:.1f} | {tl:.1f} | {to / tl:.2f}× | {med(o, 'ttft_p50_ms'):.0f} / {med(o, 'ttft_p99_ms'):.0f} | {med(l, 'ttft_p50_ms'):.0f} / {med(l, 'ttft_p99_ms'):.0f} | "
              f"{med(o, 'itl_p50_ms'):.1f} / {med(o, 'itl_p99_ms'):.1f} | {med(l, 'itl_p50_ms'):.1f} / {med(l, 'itl_p99_ms'):.1f} | {err(o)} / {err(l)} |")
print("\nRaw records:\n")
print("\`\`\`")
for line in open(sys.argv[1]):
    print(line.rstrip())
print("\`\`\`")
PY
cat "$OUT"
