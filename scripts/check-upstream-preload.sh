#!/usr/bin/env bash
# Upstream llama.cpp b11312's own programs on libdeepseek through LD_PRELOAD. Not in CI: it
# builds llama.cpp (minutes). Builds llama-simple, llama-completion and llama-simple-chat from the pinned source
# (llama-cpp-python 0.3.36's sdist, vendor/llama.cpp), runs each on Qwen2.5-Coder-0.5B plainly
# (upstream's libllama) and with LD_PRELOAD=libdeepseek.so, and checks
#  - LD_DEBUG=bindings: every llama_* symbol that the program and upstream's libllama-common bind
#    (llama.h's, and the C++ staging API of llama-ext.h that libllama-common uses) resolves to
#    libdeepseek.so;
#  - the answers: for each prompt of tests/data/generate/ (llama.cpp's greedy steps with their
#    top-5 logits), both runs generate exactly the reference's decisive prefix (the steps before
#    the first top-1 margin < 1.0; beyond it equally faithful engines may part ways), so their
#    outputs must be identical.
# usage: scripts/check-upstream-preload.sh
# env: LLAMA_CPP_SRC   the pinned llama.cpp tree (default: downloads the sdist into target/upstream)
#      UPSTREAM_BUILD  its build directory (default: target/upstream/build)
#      JOBS            parallel compile jobs (default 2)
#      DEEPSEEK_LIB_DIR  where libdeepseek.so is (default: target/release, built if missing)
#      LLAMA_SERVER    an upstream llama-server binary: also checks response_format requests
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${CARGO_TARGET_DIR:-$ROOT/target}
WORK=$OUT/upstream
MODEL=${DEEPSEEK_MODELS:-$HOME/.cache/deepseek/models}/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
[ -f "$MODEL" ] || scripts/fetch-models.sh qwen05
REFERENCE=tests/data/generate/qwen2.5-coder-0.5b-instruct-q4_k_m.jsonl
LIBDIR=${DEEPSEEK_LIB_DIR:-$OUT/release}
[ -f "$LIBDIR/libdeepseek.so" ] || cargo build --release --lib
OURS=$(realpath "$LIBDIR/libdeepseek.so")
mkdir -p "$WORK"

SRC=${LLAMA_CPP_SRC:-}
if [ -z "$SRC" ]; then
  if [ ! -d "$WORK/llama_cpp_python-0.3.36" ]; then
    python3 -m pip download -q --no-deps --no-binary :all: llama-cpp-python==0.3.36 -d "$WORK"
    tar -xzf "$WORK/llama_cpp_python-0.3.36.tar.gz" -C "$WORK"
  fi
  SRC=$WORK/llama_cpp_python-0.3.36/vendor/llama.cpp
fi
cmp -s "$SRC/include/llama.h" tests/data/llama-b11312.h || { echo "$SRC is not llama.cpp b11312 (llama.h differs)" >&2; exit 1; }
BUILD=${UPSTREAM_BUILD:-$WORK/build}
if [ ! -x "$BUILD/bin/llama-simple" ] || [ ! -x "$BUILD/bin/llama-completion" ] || [ ! -x "$BUILD/bin/llama-simple-chat" ]; then
  cmake -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON -DLLAMA_BUILD_TESTS=OFF \
        -DLLAMA_BUILD_SERVER=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_BUILD_MTMD=OFF > "$WORK/cmake.log"
  cmake --build "$BUILD" -j "${JOBS:-2}" --target llama-simple llama-completion llama-simple-chat > "$WORK/build.log"
fi
BIN=$BUILD/bin

# prompt <TAB> decisive prefix length, for the reference prompts that have one
mapfile -t CASES < <(python3 - "$REFERENCE" <<'EOF'
import json, sys
for line in open(sys.argv[1]):
    case = json.loads(line)
    k = 0
    for step in case["steps"]:
        top = step["top5"]
        if top[0][1] - top[1][1] < 1.0:
            break
        k += 1
    if k > 0 and "\t" not in case["prompt"] and "\n" not in case["prompt"]:
        print(f"{case['prompt']}\t{k}")
EOF
)
[ ${#CASES[@]} -gt 0 ] || { echo "no reference prompt with a decisive prefix" >&2; exit 1; }

simple() { "$BIN/llama-simple" -m "$MODEL" -n "$2" "$1"; }
completion() {
  "$BIN/llama-completion" -m "$MODEL" -p "$1" -n "$2" --temp 0 -no-cnv -c 256 -t 2 --no-warmup --simple-io --seed 1 </dev/null
}

failures=0
for program in simple completion; do
  for case in "${CASES[@]}"; do
    prompt=${case%$'\t'*}
    k=${case##*$'\t'}
    theirs=$($program "$prompt" "$k" 2>"$WORK/$program.upstream.err") || { echo "FAIL $program (upstream) on '$prompt': $(tail -3 "$WORK/$program.upstream.err")"; failures=$((failures + 1)); continue; }
    ours=$(LD_PRELOAD=$OURS $program "$prompt" "$k" 2>"$WORK/$program.preload.err") || { echo "FAIL llama-$program with LD_PRELOAD on '$prompt': $(tail -3 "$WORK/$program.preload.err")"; failures=$((failures + 1)); continue; }
    if [ "$theirs" == "$ours" ]; then
      echo "ok   llama-$program, $k decisive tokens: $(printf '%q' "$ours")"
    else
      echo "FAIL llama-$program, $k decisive tokens: upstream $(printf '%q' "$theirs") / LD_PRELOAD $(printf '%q' "$ours")"
      failures=$((failures + 1))
    fi
  done
  # which library each llama_* reference of the process binds to
  first=${CASES[0]}
  LD_DEBUG=bindings LD_DEBUG_OUTPUT=$WORK/$program.bindings LD_PRELOAD=$OURS $program "${first%$'\t'*}" 1 >/dev/null 2>&1
  log=$(cat "$WORK/$program.bindings".* && rm -f "$WORK/$program.bindings".*)
  # calls of upstream libllama's API (llama.h's C names and the C++ names of its staging API,
  # llama-ext.h) from the program and its libraries; upstream's libllama itself (still loaded,
  # unused) binding its own internal symbols is not a call of the program
  api=$(nm -D --defined-only "$BIN/libllama.so" | awk '$3 ~ /^(_Z[0-9]+)?llama_/ { print "`" $3 "'"'"'" }')
  calls=$(grep "normal symbol" <<<"$log" | grep -v "binding file [^ ]*/libllama\.so[.0-9]* " | grep -F -f <(echo "$api") || true)
  llama_total=$(grep -c . <<<"$calls" || true)
  llama_elsewhere=$(grep -v " to [^ ]*libdeepseek\.so " <<<"$calls" || true)
  ggml_ours=$(grep "normal symbol \`ggml_" <<<"$log" | grep " to [^ ]*libdeepseek\.so " | sed 's/.*`\(.*\)'"'"'.*/\1/' | sort -u | tr '\n' ' ')
  ggml_theirs=$(grep "normal symbol \`ggml_" <<<"$log" | grep -vc " to [^ ]*libdeepseek\.so " || true)
  if [ "$llama_total" -gt 0 ] && [ -z "$llama_elsewhere" ]; then
    echo "ok   llama-$program: all $llama_total llama_* bindings go to libdeepseek.so; ggml_* bound to ours: ${ggml_ours:-none}; $ggml_theirs other ggml_* bindings to upstream's libggml"
  else
    echo "FAIL llama-$program: $llama_total llama_* bindings, these not to libdeepseek.so:"
    echo "$llama_elsewhere" | head -20
    failures=$((failures + 1))
  fi
done
# llama-simple-chat (if built): one question through the model's chat template, same answer
if [ -x "$BIN/llama-simple-chat" ]; then
  question="What is 2+3? Answer with the number only."
  theirs=$(printf '%s\n' "$question" | "$BIN/llama-simple-chat" -m "$MODEL" -c 512 2>/dev/null) || true
  ours=$(printf '%s\n' "$question" | LD_PRELOAD=$OURS "$BIN/llama-simple-chat" -m "$MODEL" -c 512 2>/dev/null) || true
  if [ -n "$ours" ] && [ "$theirs" == "$ours" ] && grep -q 5 <<<"$ours"; then
    echo "ok   llama-simple-chat: same answer $(printf '%q' "$ours")"
  else
    echo "FAIL llama-simple-chat: upstream $(printf '%q' "$theirs") / LD_PRELOAD $(printf '%q' "$ours")"
    failures=$((failures + 1))
  fi
fi
# llama-server (LLAMA_SERVER: an upstream b11312 llama-server binary, e.g. a full build's
# bin/llama-server; this script's own build leaves the server out): response_format json_object
# and json_schema requests, under LD_PRELOAD, must return JSON that parses and fits the schema.
if [ -n "${LLAMA_SERVER:-}" ]; then
  port=18099
  LD_PRELOAD=$OURS "$LLAMA_SERVER" -m "$MODEL" --port $port -c 1024 -t 2 --no-webui > "$WORK/server.log" 2>&1 &
  server=$!
  for _ in $(seq 1 120); do curl -s "localhost:$port/health" | grep -q ok && break; sleep 1; done
  for format in '{"type":"json_object"}' \
      '{"type":"json_schema","json_schema":{"name":"cat","schema":{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"}},"required":["name","age"],"additionalProperties":false}}}'; do
    body='{"messages":[{"role":"user","content":"Describe a cat in JSON."}],"max_tokens":96,"temperature":0,"response_format":'"$format"'}'
    reply=$(curl -s "localhost:$port/v1/chat/completions" -H 'Content-Type: application/json' -d "$body" || true)
    if python3 -c '
import json, sys
reply, fmt = json.loads(sys.argv[1]), json.loads(sys.argv[2])
value = json.loads(reply["choices"][0]["message"]["content"])
if fmt["type"] == "json_schema":
    schema = fmt["json_schema"]["schema"]
    assert set(value) == set(schema["required"]) and isinstance(value["name"], str) and isinstance(value["age"], int), value
' "$reply" "$format" 2>/dev/null; then
      echo "ok   llama-server response_format $(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["type"])' "$format"): $(python3 -c 'import json,sys; print(json.dumps(json.loads(sys.argv[1])["choices"][0]["message"]["content"]))' "$reply")"
    else
      echo "FAIL llama-server response_format $format: ${reply:0:300}"
      failures=$((failures + 1))
    fi
  done
  kill "$server"
  wait "$server" 2>/dev/null || true
fi
if [ "$failures" -gt 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all upstream LD_PRELOAD checks passed"
