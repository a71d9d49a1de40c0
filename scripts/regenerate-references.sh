#!/usr/bin/env bash
# Rebuilds the test references (tests/data, src/quant/iq_tables.rs, server/tests/data) from
# llama.cpp b11312 with the generator programs committed beside them, then says which
# regenerated files differ from the committed ones and by how much. Not in CI: the first run
# downloads llama-cpp-python 0.3.36's sdist and builds llama.cpp (10-20 minutes on 2 cores).
# tests/data/README.md lists every reference, its generator and the test that reads it.
#
#   scripts/regenerate-references.sh [--out DIR | --in-place] [--models] [STAGE...]
#
# STAGE (default: all but models and pretok): copies tables tokenizer chat grammar quant-ref logits
#   moe generate embeddings upstream-ops python; `models` (or --models) also rebuilds the tiny GGUF
#   models themselves (numpy writers, llama-quantize, llama-gguf-split) and compares them;
#   `pretok` writes OUT/pretok-fuzz, the data of the ignored differential pre-tokenizer test (random
#   texts and upstream's unicode_regex_split of each; not a committed reference).
# --out DIR   where the regenerated files go, under their repository paths (default:
#             $CARGO_TARGET_DIR/upstream/references, i.e. target/upstream/references; emptied first,
#             so it must be empty, new or an earlier output)
# --in-place  also copy every regenerated file that differs into the working tree (review with
#             git diff); the comparison is always against the files as they are before the run.
#
# References are computed from the committed inputs (the tiny models, vocabularies, grammar
# cases, ...), so a golden's change means upstream computes something else, not that its model
# changed. Floating-point references depend on the CPU and compiler of the machine that makes
# them (ggml's kernels differ between AVX2 and AVX-512, GCC contracts mul+add into FMA, a greedy
# token on a near-tie flips and changes every row after it): regenerated on another machine they
# may differ in the last bits, which is why the tests compare them with the tolerances of
# tests/data/README.md. The report measures each difference as the tests would.
#
# env: LLAMA_CPP_SRC   the pinned llama.cpp tree (default: the sdist, downloaded into target/upstream)
#      UPSTREAM_BUILD  an existing build of it (CMake build dir with bin/libllama.so, libllama-common.so,
#                      libggml*.so), reused as is; default target/upstream/build, built here if
#                      missing. Tools it lacks (llama-quantize, llama-gguf-split) are compiled
#                      against its libraries into target/upstream/reference-tools.
#      JOBS            parallel compile jobs (default 2)
#      DEEPSEEK_MODELS where scripts/fetch-models.sh keeps the real models (generate, embeddings, python)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export LC_COLLATE=C  # glob order (ref_tensors.txt lists files in it)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
WORK=$TARGET/upstream
UPSTREAM="llama.cpp b11312 (commit 0c1e57098, vendored by llama-cpp-python 0.3.36)"
ALL_STAGES="copies tables tokenizer chat grammar quant-ref logits moe kv-types generate embeddings upstream-ops python"

OUT=$WORK/references
IN_PLACE=0
MODELS=0
STAGES=()
while [ $# -gt 0 ]; do
  case $1 in
    --out) OUT=$2; shift 2 ;;
    --in-place) IN_PLACE=1; shift ;;
    --models) MODELS=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "unknown option $1" >&2; exit 2 ;;
    *) STAGES+=("$1"); shift ;;
  esac
done
[ ${#STAGES[@]} -gt 0 ] || read -r -a STAGES <<< "$ALL_STAGES"
[ $MODELS = 0 ] || STAGES+=(models)
for s in "${STAGES[@]}"; do
  case " $ALL_STAGES models pretok " in *" $s "*) ;; *) echo "unknown stage $s (known: $ALL_STAGES models pretok)" >&2; exit 2 ;; esac
done
want() { case " ${STAGES[*]} " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
OUT=$(realpath -m "$OUT")
case "$ROOT/" in "${OUT%/}/"*) echo "--out must not hold the repository (it is emptied first; use --in-place)" >&2; exit 2 ;; esac
if [ -d "$OUT" ] && [ -n "$(ls -A "$OUT")" ] && [ ! -f "$OUT/.produced" ]; then
  echo "--out $OUT is not empty and not an earlier output of this script: not emptying it" >&2; exit 2
fi
rm -rf "$OUT"
mkdir -p "$OUT" "$WORK"
PRODUCED=$OUT/.produced
: > "$PRODUCED"
say() { echo "== $*" >&2; }
# out REL: the regenerated file's path for repository path REL (created directory, recorded)
out() { mkdir -p "$(dirname "$OUT/$1")"; echo "$1" >> "$PRODUCED"; echo "$OUT/$1"; }
NICE="nice -n 10"

# ---- the pinned source and its build
SRC=${LLAMA_CPP_SRC:-}
if [ -z "$SRC" ]; then
  if [ ! -d "$WORK/llama_cpp_python-0.3.36" ]; then
    # (--no-build-isolation needs scikit-build-core installed to read the sdist's metadata; else pip fetches it)
    python3 -m pip download -q --no-deps --no-binary :all: --no-build-isolation llama-cpp-python==0.3.36 -d "$WORK" \
      || python3 -m pip download -q --no-deps --no-binary :all: llama-cpp-python==0.3.36 -d "$WORK"
    tar -xzf "$WORK/llama_cpp_python-0.3.36.tar.gz" -C "$WORK"
  fi
  SRC=$WORK/llama_cpp_python-0.3.36/vendor/llama.cpp
fi
cmp -s "$SRC/include/llama.h" tests/data/llama-b11312.h || { echo "$SRC is not llama.cpp b11312 (llama.h differs)" >&2; exit 1; }
if [ -f "$SRC/../../CHANGELOG.md" ] && ! grep -q "0c1e57098" "$SRC/../../CHANGELOG.md"; then
  echo "$SRC/../.. is not llama-cpp-python 0.3.36 (its CHANGELOG does not name llama.cpp 0c1e57098)" >&2; exit 1
fi
BUILD=${UPSTREAM_BUILD:-$WORK/build}
BIN=$BUILD/bin
if [ ! -f "$BIN/libllama.so" ] || [ ! -f "$BIN/libllama-common.so" ]; then
  [ -z "${UPSTREAM_BUILD:-}" ] || { echo "UPSTREAM_BUILD=$BUILD has no bin/libllama.so and bin/libllama-common.so" >&2; exit 1; }
  say "building llama.cpp b11312 in $BUILD (10-20 minutes on 2 cores the first time)"
  cmake -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_OPENSSL=OFF -DBUILD_SHARED_LIBS=ON \
        -DLLAMA_CURL=OFF > "$WORK/references-cmake.log"
  $NICE cmake --build "$BUILD" -j "${JOBS:-2}" --target llama llama-common llama-quantize llama-gguf-split > "$WORK/references-build.log"
fi
say "upstream: $SRC, built in $BUILD"

# ---- generators, compiled against upstream (REFERENCE_UPSTREAM: the JSON they write names the build)
TOOLS=$WORK/reference-tools
# kept between runs for the same tree and build; a program is rebuilt when its source is newer
[ "$(cat "$TOOLS/.for" 2>/dev/null)" = "$SRC $BIN $UPSTREAM" ] || rm -rf "$TOOLS"
mkdir -p "$TOOLS"
echo "$SRC $BIN $UPSTREAM" > "$TOOLS/.for"
fresh() { [ -x "$TOOLS/$1" ] && [ "$TOOLS/$1" -nt "$2" ]; } # name source
INC=(-I"$SRC/include" -I"$SRC/ggml/include")
LINK=(-L"$BIN" -Wl,-rpath,"$BIN")
CXXINC=(-I"$SRC/common" -I"$SRC/include" -I"$SRC/vendor" -I"$SRC/ggml/include")
G=tests/data/gen
build_c() { # name source libs...
  local name=$1 src=$2; shift 2
  fresh "$name" "$src" && return
  $NICE "${CC:-cc}" -std=gnu11 -O2 -Wno-deprecated-declarations "-DREFERENCE_UPSTREAM=\"$UPSTREAM\"" "${INC[@]}" "$src" "${LINK[@]}" "$@" -lm -o "$TOOLS/$name"
}
build_cxx() { # name source [more sources, libs...]
  local name=$1; shift
  fresh "$name" "$1" && return
  $NICE "${CXX:-c++}" -std=c++17 -O2 "${CXXINC[@]}" "$@" "${LINK[@]}" -o "$TOOLS/$name"
}
say "compiling the generators into $TOOLS"
build_c golden $G/golden.c -lllama
# the same program whose contexts get the KV cache types of GOLDEN_TYPE_K/_V and flash attention
build_c golden_kv $G/golden.c -lllama -include tests/data/kv_types/golden_kv.h
build_c golden_dsv4 $G/golden_dsv4.c -lllama -lggml -lggml-base
build_c chat_golden $G/chat_golden.c -lllama
build_c pieces $G/pieces.c -lllama
build_c trace tests/data/grammar/gen/trace.c -lllama
build_c gen_trace tests/data/moe_trace/gen_trace.c -lllama -lggml -lggml-base
build_c embed tests/data/embeddings/embed.c -lllama
build_c dump tests/data/upstream_ops/dump.c -lllama -lggml -lggml-base
build_c fa_dump tests/data/upstream_ops/fa_dump.c -lggml -lggml-base -lggml-cpu
build_c tiled_dump tests/data/upstream_ops/tiled_dump.c -lggml -lggml-base -lggml-cpu
build_c gen_ref tests/data/quants/gen_ref.c -lggml-cpu -lggml-base -lggml
build_cxx schema2gbnf tests/data/grammar/gen/schema2gbnf.cpp -lllama-common -lllama
build_cxx json_schema_oracle server/tests/data/json_schema_oracle.cpp -lllama-common -lllama
build_cxx pretok_split $G/pretok_split.cpp -lllama
fresh regex_ref tests/data/grammar/gen/regex_ref.cpp || $NICE "${CXX:-c++}" -std=c++17 -O1 tests/data/grammar/gen/regex_ref.cpp -o "$TOOLS/regex_ref"
# upstream's own tools, for the models stage: from the build, else compiled against its libraries
tool() { # name: path of upstream's tool
  if [ -x "$BIN/$1" ]; then echo "$BIN/$1"; return; fi
  if [ ! -x "$TOOLS/$1" ]; then
    case $1 in
      llama-quantize) build_cxx "$1" "$SRC/tools/quantize/quantize.cpp" "$SRC/tools/quantize/main.cpp" -lllama-common -lllama -lggml -lggml-base >&2 ;;
      llama-gguf-split) build_cxx "$1" "$SRC/tools/gguf-split/gguf-split.cpp" -lllama-common -lllama -lggml -lggml-base >&2 ;;
    esac
  fi
  echo "$TOOLS/$1"
}

# python with numpy and upstream's gguf-py (tokenizer's pre-tokenizer variants, the models stage)
PY=python3
if ! python3 -c 'import numpy' 2>/dev/null; then
  [ -x "$WORK/references-venv/bin/python" ] || { python3 -m venv "$WORK/references-venv" && "$WORK/references-venv/bin/pip" install -q numpy; }
  PY=$WORK/references-venv/bin/python
fi
export PYTHONPATH="$SRC/gguf-py${PYTHONPATH:+:$PYTHONPATH}"
D=tests/data
fetch_models() { scripts/fetch-models.sh "$@"; }
MODELS_DIR=${DEEPSEEK_MODELS:-$HOME/.cache/deepseek/models}

# ---- copies: files taken from the upstream tree unchanged
if want copies; then
  say "copies: llama.h, tokenizer test vocabularies, chat templates, grammars"
  cp "$SRC/include/llama.h" "$(out $D/llama-b11312.h)"
  for v in deepseek-llm deepseek-coder qwen2 llama-bpe; do
    for e in "" .inp .out; do cp "$SRC/models/ggml-vocab-$v.gguf$e" "$(out $D/vocab/ggml-vocab-$v.gguf$e)"; done
  done
  for f in $D/chat/templates/*.jinja; do cp "$SRC/models/templates/$(basename "$f")" "$(out "$f")"; done
  for g in arithmetic c chess english japanese json json_arr list; do cp "$SRC/grammars/$g.gbnf" "$(out $D/grammar/$g.gbnf)"; done
fi

# ---- tables: data extracted from upstream's sources
if want tables; then
  say "tables: IQ grids, grammar-parser and JSON-schema test expectations"
  (cd "$OUT" && mkdir -p src/quant && $PY "$ROOT/$D/quants/gen_tables.py" "$SRC/ggml/src/ggml-common.h") > /dev/null
  echo src/quant/iq_tables.rs >> "$PRODUCED"
  $PY $G/parser_cases.py "$SRC/tests/test-grammar-parser.cpp" "$UPSTREAM" > "$(out $D/grammar/parser_cases.json)"
  $PY server/tests/data/extract_json_schema_cases.py "$SRC/tests/test-json-schema-to-grammar.cpp" > "$(out server/tests/data/json_schema_to_grammar.txt)"
fi

# ---- tokenizer: token ids of a corpus (four pre-tokenizers), every token's piece
if want tokenizer; then
  say "tokenizer: tokenize/*.jsonl, pieces/*.pieces.txt.gz"
  V=$D/vocab/deepseek-r1-qwen.gguf
  $NICE "$TOOLS/golden" tokenize $V $D/tokenize/corpus.txt > "$(out $D/tokenize/deepseek-r1-qwen.jsonl)"
  for pre in deepseek-v3 deepseek-llm deepseek-coder; do
    variant=$WORK/deepseek-r1-qwen-vocab.pre-$pre.gguf
    $PY "$SRC/gguf-py/gguf/scripts/gguf_new_metadata.py" --force --pre-tokenizer "$pre" $V "$variant" > "$WORK/tokenizer.log" 2>&1
    $NICE "$TOOLS/golden" tokenize "$variant" $D/tokenize/corpus.txt > "$(out $D/tokenize/deepseek-r1-qwen-vocab.pre-$pre.jsonl)"
    rm -f "$variant"
  done
  for p in deepseek-r1-qwen:deepseek-r1-qwen deepseek-llm:ggml-vocab-deepseek-llm deepseek-coder:ggml-vocab-deepseek-coder; do
    $NICE "$TOOLS/pieces" "$D/vocab/${p#*:}.gguf" | gzip -9n > "$(out "$D/pieces/${p%%:*}.pieces.txt.gz")"
  done
fi

# ---- chat: llama_chat_apply_template on two conversations (template names as they were given:
# built-in names, @FILE relative to the templates folder, the R1 vocabulary's own template); and
# on every built-in name, test-chat-template.cpp's template strings and each family's markers
# (chat_cases.py passes the strings, NUL-separated)
if want chat; then
  say "chat: chat/chat-templates.jsonl, chat/builtin-templates.json"
  CW=$WORK/chat-work
  rm -rf "$CW" && mkdir -p "$CW"
  ln -s "$ROOT/$D/vocab" "$CW/vocab"
  for f in $D/chat/templates/*.jinja; do ln -s "$ROOT/$f" "$CW/"; done
  dest=$(out $D/chat/chat-templates.jsonl)
  (cd "$CW" && "$TOOLS/chat_golden" deepseek deepseek2 deepseek3 chatml llama3 \
      @deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja @deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja \
      @deepseek-ai-DeepSeek-V3.1.jinja @llama-cpp-deepseek-r1.jinja @Qwen-Qwen2.5-7B-Instruct.jinja \
      vocab/deepseek-r1-qwen.gguf) > "$dest" 2> "$WORK/chat.log"
  mapfile -d '' -t cases < <($PY $G/chat_cases.py "$SRC/tests/test-chat-template.cpp")
  [ ${#cases[@]} -gt 100 ] || { echo "chat_cases.py gave ${#cases[@]} strings" >&2; exit 1; }
  "$TOOLS/chat_golden" --all "${cases[@]}" > "$(out $D/chat/builtin-templates.json)" 2>> "$WORK/chat.log"
fi

# ---- grammar: JSON-schema grammars, sampler traces, trigger-regex answers, schema oracle
if want grammar; then
  say "grammar: schema_*.gbnf, grammar/traces/*.txt, server/tests/data/json_schema_oracle.txt"
  for f in $D/grammar/schemas/*.json; do
    "$TOOLS/schema2gbnf" "$f" > "$(out "$D/grammar/schema_$(basename "$f" .json).gbnf")"
  done
  V=$ROOT/$D/vocab/deepseek-r1-qwen.gguf
  (cd $D/grammar && $NICE "$TOOLS/trace" "$V" cases.txt . ) > "$(out $D/grammar/traces/cases.txt)"
  (cd $D/grammar && $NICE "$TOOLS/trace" "$V" cases_memcheck.txt . ) > "$(out $D/grammar/traces/cases_memcheck.txt)"
  # (upstream logs every refusal of the malformed corpus on stderr)
  (cd $D/grammar && $NICE "$TOOLS/trace" "$V" --parse malformed.txt) > "$(out $D/grammar/traces/malformed.txt)" 2> "$WORK/malformed-grammars.log"
  (cd $D/grammar && "$TOOLS/regex_ref" regex_cases.txt) > "$(out $D/grammar/traces/regex.txt)"
  $PY server/tests/data/gen_json_schemas.py 3 150 > "$WORK/schemas.jsonl"
  $PY server/tests/data/json_schema_oracle.py "$TOOLS/json_schema_oracle" "$WORK/schemas.jsonl" > "$(out server/tests/data/json_schema_oracle.txt)"
fi

# ---- quant-ref: ggml's own dequantize / activation quantizers / vec_dot of the IQ-family types
if want quant-ref; then
  say "quant-ref: quants/ref_vectors.txt, quants/ref_tensors.txt"
  $NICE "$TOOLS/gen_ref" > "$(out $D/quants/ref_vectors.txt)"
  dest=$(out $D/quants/ref_tensors.txt)
  # the tiny-qwen2 files (those it was made from; the tiny-deepseek3 ones came later)
  (cd $D/quants && LC_ALL=C $NICE "$TOOLS/gen_ref" tensors tiny-qwen2-*.gguf) > "$dest"
fi

# ---- logits and moe: scenarios A-D (golden.c, golden_dsv4.c) of every tiny model with a golden;
# moe: the quantized MoE models, whose goldens and router traces come from one run each
# model_of JSON: the model of a committed golden JSON (split models: shard 1)
model_of() {
  local json=$1 dir name
  dir=$(dirname "$(dirname "$json")"); name=$(basename "$json" .json); name=${name%.long}
  [ "$dir/golden" != $D/golden ] || dir=$D/tiny  # golden/ holds tiny/'s goldens
  if [ -f "$dir/$name.gguf" ]; then echo "$dir/$name.gguf"; else ls "$dir/$name"-00001-of-*.gguf; fi
}
if want logits || want moe; then
  for json in $D/golden/*.json $D/deepseek2/golden/*.json $D/deepseek-family/golden/*.json $D/quants/golden/*.json $D/splits/golden/*.json; do
    case $json in *.long.json) continue ;; esac
    prefix=${json%.json}; model=$(model_of "$json")
    if [ -f "$prefix.router" ]; then
      want moe || continue
      say "moe: $prefix"
      j=$(out "$prefix.json"); out "$prefix.f32" > /dev/null
      dsv4=()
      case $model in *deepseek4*) dsv4=(--dsv4) ;; esac
      if [ ${#dsv4[@]} -gt 0 ]; then
        $NICE "$TOOLS/golden_dsv4" logits "$model" "${j%.json}" > /dev/null
      else
        $NICE "$TOOLS/golden" logits "$model" "${j%.json}" > /dev/null
      fi
      # the trace replays the scenarios from the tokens of the golden just made (deepseek4: D',
      # seq 1 restarted at position 0)
      mapfile -t args < <($PY -c '
import json, sys
g = json.load(open(sys.argv[1]))
j = lambda k: ",".join(map(str, g[k]))
d = g["D_tokens"]
print("\n".join([j("A_tokens"), j("B_tokens"), j("C_seq0_tokens"), j("C_seq1_tokens"), j("C_seq2_tokens"), str(d.get("seq1_pos3", d.get("seq1_pos0"))), str(d["seq3_pos12"])]))
' "$OUT/$prefix.json")
      $NICE "$TOOLS/gen_trace" "${dsv4[@]}" "$model" "${args[@]}" > "$(out "$prefix.router")"
      if [ -f "$prefix.long.router" ]; then
        j=$(out "$prefix.long.json"); out "$prefix.long.f32" > /dev/null
        $NICE "$TOOLS/golden_dsv4" long "$model" "${j%.json}" > /dev/null
        mapfile -t args < <($PY -c '
import json, sys
g = json.load(open(sys.argv[1]))
j = lambda k: ",".join(map(str, g[k]))
print("\n".join([j("L_tokens"), j("L_positions"), j("LB_tokens")]))
' "$OUT/$prefix.long.json")
        $NICE "$TOOLS/gen_trace" --long "$model" "${args[@]}" > "$(out "$prefix.long.router")"
      fi
    else
      want logits || continue
      say "logits: $prefix"
      case $model in
        *deepseek4*)
          j=$(out "$prefix.json"); out "$prefix.f32" > /dev/null
          $NICE "$TOOLS/golden_dsv4" logits "$model" "${j%.json}" > /dev/null
          if [ -f "$prefix.long.json" ]; then
            j=$(out "$prefix.long.json"); out "$prefix.long.f32" > /dev/null
            $NICE "$TOOLS/golden_dsv4" long "$model" "${j%.json}" > /dev/null
          fi ;;
        *)
          j=$(out "$prefix.json"); out "$prefix.f32" > /dev/null
          $NICE "$TOOLS/golden" logits "$model" "${j%.json}" > /dev/null ;;
      esac
    fi
  done
fi

# ---- kv-types: scenarios A-D with each KV cache type (tests/kv_types.rs), and greedy tokens of
# the real models with quantized caches (llama-cpp-python and deepseek-server checks)
if want kv-types; then
  fetch_models smollm2 qwen05
  while read -r model k v name; do
    prefix=$D/kv_types/$(basename "$model" .gguf)-kv-$name
    say "kv-types: $prefix"
    j=$(out "$prefix.json"); out "$prefix.f32" > /dev/null
    GOLDEN_TYPE_K=$k GOLDEN_TYPE_V=$v $NICE "$TOOLS/golden_kv" logits "$D/$model" "${j%.json}" > /dev/null
  done < $D/kv_types/list.txt
  say "kv-types: python/qwen05-kv-types-b11312.json, kv_types/smollm2-generate.jsonl"
  for kv in "8 1" "2 2"; do
    set -- $kv
    GOLDEN_TYPE_K=$1 GOLDEN_TYPE_V=$2 $NICE "$TOOLS/golden_kv" generate "$MODELS_DIR/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf" 12 "def fibonacci(n):" > "$WORK/kv-$1-$2.jsonl"
  done
  $PY - "$WORK/kv-8-1.jsonl" "$WORK/kv-2-2.jsonl" "$UPSTREAM" > "$(out $D/python/qwen05-kv-types-b11312.json)" <<'PYEOF'
import json, sys
out = {"producer": "llama.cpp b11312 (llama-cpp-python 0.3.36), tests/data/kv_types/golden_kv.h with golden.c generate, flash attention on",
       "upstream": sys.argv[3], "model": "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", "prompt": "def fibonacci(n):"}
for path, key in [(sys.argv[1], "type_k=8,type_v=1"), (sys.argv[2], "type_k=2,type_v=2")]:
    g = json.loads(open(path).readline())
    out[key] = [s["token"] for s in g["steps"]]
    # each step's gap between upstream's two best logits (a near tie may go either way)
    out[key + " gaps"] = [round(s["top5"][0][1] - s["top5"][1][1], 4) for s in g["steps"]]
    out["prompt_tokens"] = g["prompt_tokens"]
print(json.dumps(out))
PYEOF
  o=$(out $D/kv_types/smollm2-generate.jsonl)
  for kv in "2 2" "1 1"; do
    set -- $kv
    GOLDEN_TYPE_K=$1 GOLDEN_TYPE_V=$2 $NICE "$TOOLS/golden_kv" generate "$MODELS_DIR/smollm2-135m-instruct-q4_1.gguf" 1 "The capital of France is" >> "$o"
  done
fi

# ---- generate: real models, greedy, 32 steps with the top-5 logits
PROMPTS=("The capital of France is" "Once upon a time" "def fibonacci(n):" "深度求索的模型在中央处理器上运行，" "Memory leaks in C++ are")
if want generate; then
  fetch_models smollm2 qwen05
  for m in smollm2-135m-instruct-q4_1 qwen2.5-coder-0.5b-instruct-q4_k_m; do
    say "generate: $m"
    $NICE "$TOOLS/golden" generate "$MODELS_DIR/$m.gguf" 32 "${PROMPTS[@]}" > "$(out $D/generate/$m.jsonl)"
  done
fi

# ---- embeddings: pooled and per-token embeddings (embed.c)
if want embeddings; then
  fetch_models smollm2
  say "embeddings: embeddings/*.f32"
  $NICE "$TOOLS/embed" $D/tiny/tiny-qwen2-f32.gguf "$(out $D/embeddings/tiny-qwen2-f32.f32)"
  $NICE "$TOOLS/embed" $D/tiny/tiny-llama-q8_0.gguf "$(out $D/embeddings/tiny-llama-q8_0.f32)"
  $NICE "$TOOLS/embed" "$MODELS_DIR/smollm2-135m-instruct-q4_1.gguf" "$(out $D/embeddings/smollm2-135m-instruct-q4_1.f32)"
  $NICE "$TOOLS/embed" $D/tiny/tiny-qwen2-f32.gguf "$(out $D/embeddings/tiny-qwen2-f32.rank.f32)" rank
  $NICE "$TOOLS/embed" "$MODELS_DIR/smollm2-135m-instruct-q4_1.gguf" "$(out $D/embeddings/smollm2-135m-instruct-q4_1.rank.f32)" rank
fi

# ---- upstream-ops: one op's inputs and output from the first decode (dump.c), cut to the first rows
if want upstream-ops; then
  say "upstream-ops: upstream_ops/*.f32"
  A=$($PY -c 'import json, sys; print(",".join(map(str, json.load(open(sys.argv[1]))["A_tokens"])))' $D/deepseek2/golden/tiny-deepseek2-lite-q8_0.json)
  DUMP=$WORK/ops-dump
  rm -rf "$DUMP" && mkdir -p "$DUMP/lite" "$DUMP/v3"
  $NICE "$TOOLS/dump" $D/deepseek2/tiny-deepseek2-lite-q8_0.gguf "$A" "$DUMP/lite" 2> /dev/null
  $NICE "$TOOLS/dump" $D/deepseek2/tiny-deepseek3-q4_k_m.gguf "${A%,*}" "$DUMP/v3" 2> /dev/null
  cut_rows() { head -c "$3" "$DUMP/$1.bin" > "$(out "$D/upstream_ops/$2.f32")"; }  # tensor file, name, bytes
  cut_rows lite/ffn_gate-0 ffn_gate_0 $((8 * 768 * 4))
  cut_rows lite/ffn_up-0 ffn_up_0 $((8 * 768 * 4))
  cut_rows lite/ffn_swiglu-0 ffn_swiglu_0 $((8 * 768 * 4))
  cut_rows lite/ffn_moe_gate-1 ffn_moe_gate_1 $((32 * 256 * 4))
  cut_rows lite/ffn_moe_up-1 ffn_moe_up_1 $((32 * 256 * 4))
  cut_rows lite/ffn_moe_swiglu-1 ffn_moe_swiglu_1 $((32 * 256 * 4))
  cut_rows v3/attn_norm-0 q4k_kv_a_in_39 $((39 * 256 * 4))
  cut_rows v3/kv_cmpr_pe-0 q4k_kv_a_out_39 $((39 * 320 * 4))
  mkdir -p "$DUMP/v3q8"
  $NICE "$TOOLS/dump" $D/deepseek2/tiny-deepseek3-q8_0.gguf "$A" "$DUMP/v3q8" 2> /dev/null
  cut_rows v3q8/ffn_moe_weighted-1 dsv3_moe_weighted_1 $((8 * 4 * 256 * 4))
  cut_rows v3q8/ffn_moe_out-1 dsv3_moe_out_1 $((8 * 256 * 4))
  cut_rows v3q8/ffn_moe_probs_masked-1 dsv3_moe_probs_masked_1 $((8 * 16 * 4))
  # deepseek4's scalar ops (the same bits on every x86 build): golden_dsv4's GV_DUMP keeps each
  # name's first evaluation (hc_comb-0: block 0's attention site, not its FFN site)
  mkdir -p "$DUMP/v4"
  GV_DUMP=",hc_mixes-0,hc_comb-0,ffn_moe_gate-0,ffn_moe_up-0,ffn_moe_swiglu_limited-0," GV_DUMP_DIR="$DUMP/v4" \
    $NICE "$TOOLS/golden_dsv4" logits $D/deepseek-family/tiny-deepseek4-q8_0.gguf "$DUMP/v4/out" > /dev/null
  cut_rows v4/hc_mixes-0 dsv4_hc_mixes_0 $((40 * 24 * 4))
  cut_rows v4/hc_comb-0 dsv4_hc_comb_0 $((40 * 16 * 4))
  cut_rows v4/ffn_moe_gate-0 dsv4_moe_gate_0 $((80 * 32 * 4))
  cut_rows v4/ffn_moe_up-0 dsv4_moe_up_0 $((80 * 32 * 4))
  cut_rows v4/ffn_moe_swiglu_limited-0 dsv4_moe_swiglu_clamp_0 $((80 * 32 * 4))
  # ggml's flash attention on seeded inputs (tiled kernel for 70 rows, one-chunk kernel for 40)
  mkdir -p "$DUMP/fa"
  $NICE "$TOOLS/fa_dump" "$DUMP/fa"
  for f in fa_q.f32 fa_k.f16 fa_v.f16 fa_tiled_out.f32 fa_tiled_sinks_out.f32 fa_one_chunk_out.f32 \
           fa_decode_q.f32 fa_decode_k.f16 fa_decode_v.f16 fa_split2_out.f32 fa_split2_sinks_out.f32 fa_split3_sinks_out.f32; do
    cp "$DUMP/fa/$f" "$(out "$D/upstream_ops/$f")"
  done
  # ggml's tiled K-quant / IQ matmul on seeded weights of every type it serves
  mkdir -p "$DUMP/tiled"
  $NICE "$TOOLS/tiled_dump" "$DUMP/tiled"
  for f in "$DUMP"/tiled/tiled_*; do
    cp "$f" "$(out "$D/upstream_ops/$(basename "$f")")"
  done
fi

# ---- python: llama-cpp-python 0.3.36 (Python code only) on upstream's libllama, per-token embeddings
if want python; then
  fetch_models qwen05
  say "python: python/qwen05-embeddings-b11312.json"
  VENV=$WORK/references-llama-cpp-python
  if ! "$VENV/bin/python" -c 'import importlib.metadata as m; assert m.version("llama_cpp_python") == "0.3.36"; import numpy' 2>/dev/null; then
    rm -rf "$VENV"
    python3 -m venv "$VENV"
    sdist=llama-cpp-python==0.3.36
    [ -f "$WORK/llama_cpp_python-0.3.36.tar.gz" ] && sdist=$WORK/llama_cpp_python-0.3.36.tar.gz
    # LLAMA_BUILD=OFF: only the Python code; the library is upstream's, through LLAMA_CPP_LIB_PATH
    CMAKE_ARGS="-DLLAMA_BUILD=OFF -DLLAVA_BUILD=OFF" "$VENV/bin/pip" install -q --disable-pip-version-check numpy "$sdist"
  fi
  REFERENCE_UPSTREAM=$UPSTREAM LLAMA_CPP_LIB_PATH=$BIN $NICE "$VENV/bin/python" tests/python/test_llama_cpp_python.py \
    "$MODELS_DIR/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf" --write-embedding-reference "$(out $D/python/qwen05-embeddings-b11312.json)"
fi

# ---- pretok: texts and upstream's pre-tokenizer splits for tokenizer::pretok::differential
if want pretok; then
  say "pretok: $OUT/pretok-fuzz (then: DEEPSEEK_PRETOK_FUZZ_DIR=$OUT/pretok-fuzz cargo test --lib pretok_matches_upstream -- --ignored)"
  $NICE $PY $G/pretok_fuzz.py "$SRC" "$TOOLS/pretok_split" "$OUT/pretok-fuzz" 2000 1
fi

# ---- models: the tiny models themselves (inputs of the references above), from scratch
if want models; then
  say "models: tiny, deepseek2, deepseek-family, quants, splits"
  QUANTIZE=$(tool llama-quantize); SPLIT=$(tool llama-gguf-split)
  M=$WORK/models-work
  rm -rf "$M" && mkdir -p "$M"
  (cd "$M" && $NICE $PY "$ROOT/$G/make_tiny_models.py" . && $NICE $PY "$ROOT/$G/make_tiny_deepseek2.py" . \
     && $NICE $PY "$ROOT/$G/make_tiny_deepseek_family.py" .) > "$WORK/models.log" 2>&1
  quantize() { $NICE "$QUANTIZE" "$@" >> "$WORK/models.log" 2>&1; } # thread count 1: byte-reproducible
  for m in tiny-qwen2:f32,f16,bf16,q8_0,q4_0,q4_1,q5_0,q5_1,q2_k,q3_k_m,q4_k_m,q5_k_m,q6_k tiny-llama:f32,f16,q8_0,q4_0,q4_k_m,q6_k; do
    n=${m%%:*}
    for t in $(tr , ' ' <<< "${m#*:}"); do
      if [ $t = f32 ]; then cp "$M/$n-f32.gguf" "$(out $D/tiny/$n-f32.gguf)"; else quantize "$M/$n-f32.gguf" "$(out $D/tiny/$n-$t.gguf)" "${t^^}" 1; fi
    done
  done
  for n in deepseek2/tiny-deepseek2-lite deepseek2/tiny-deepseek3 deepseek-family/tiny-deepseek-moe deepseek-family/tiny-deepseek2-legacy \
           deepseek-family/tiny-deepseek32 deepseek-family/tiny-deepseek4; do
    cp "$M/$(basename $n)-f32.gguf" "$(out $D/$n-f32.gguf)"
    for t in q8_0 q4_k_m; do quantize "$M/$(basename $n)-f32.gguf" "$(out $D/$n-$t.gguf)" "${t^^}" 1; done
  done
  quantize "$M/tiny-deepseek3-f32.gguf" "$(out $D/deepseek2/tiny-deepseek3-q6_k.gguf)" Q6_K 1
  # quants (tests/data/README.md): run from a folder whose imatrix/ holds the committed importance
  # matrices, as the files record the relative path
  Q=$M/quants
  mkdir -p "$Q" && ln -s "$ROOT/$D/quants/imatrix" "$Q/imatrix"
  Q2=$M/tiny-qwen2-f32.gguf D3=$M/tiny-deepseek3-f32.gguf
  for p in iq1_m:IQ1_M iq3_xxs:IQ3_XXS iq3_s:IQ3_S iq4_nl:IQ4_NL iq4_xs:IQ4_XS tq1_0:TQ1_0 tq2_0:TQ2_0 q1_0:Q1_0 q2_0:Q2_0 iq2_s:IQ2_M mxfp4:MXFP4_MOE; do
    (cd "$Q" && quantize --imatrix imatrix/tiny-qwen2.imatrix.gguf --pure "$Q2" "$(out $D/quants/tiny-qwen2-pure-${p%%:*}.gguf)" "${p#*:}" 1)
  done
  for t in iq1_s iq2_xxs iq2_xs; do
    (cd "$Q" && quantize --imatrix imatrix/tiny-qwen2.imatrix.gguf --pure --token-embedding-type q2_K "$Q2" "$(out $D/quants/tiny-qwen2-pure-$t.gguf)" "${t^^}" 1)
  done
  (cd "$Q" && quantize --imatrix imatrix/tiny-qwen2.imatrix.gguf --pure --tensor-type '.*=nvfp4' --override-kv general.file_type=int:39 \
     "$Q2" "$(out $D/quants/tiny-qwen2-pure-nvfp4.gguf)" Q8_0 1)
  for t in iq1_s iq1_m iq2_xxs iq2_xs iq2_s iq2_m iq3_xxs iq3_xs iq3_m q2_0 q2_k_s; do
    (cd "$Q" && quantize --imatrix imatrix/tiny-qwen2.imatrix.gguf "$Q2" "$(out $D/quants/tiny-qwen2-$t.gguf)" "${t^^}" 1)
  done
  for t in iq2_xxs iq3_xxs iq4_xs mxfp4_moe; do
    (cd "$Q" && quantize --imatrix imatrix/tiny-deepseek3.imatrix.gguf "$D3" "$(out $D/quants/tiny-deepseek3-$t.gguf)" "${t^^}" 1)
  done
  (cd "$Q" && quantize --imatrix imatrix/tiny-deepseek3.imatrix.gguf --token-embedding-type q4_K --output-tensor-type q6_K \
     --tensor-type 'attn_=q4_K' --tensor-type '_shexp=q6_K' \
     --tensor-type 'ffn_(gate|up)\.weight=q4_K' --tensor-type 'ffn_down\.weight=q6_K' \
     --tensor-type 'blk\.1\.ffn_down_exps=iq2_xxs' --tensor-type '_exps=iq1_s' \
     "$D3" "$(out $D/quants/tiny-deepseek3-ud-iq1_s.gguf)" IQ1_S 1)
  # splits, cut from the committed files
  S=$OUT/$D/splits
  mkdir -p "$S"
  $NICE "$SPLIT" --split --split-max-size 2M $D/deepseek2/tiny-deepseek3-q4_k_m.gguf "$S/tiny-deepseek3-q4_k_m" >> "$WORK/models.log" 2>&1
  $NICE "$SPLIT" --split --split-max-tensors 10 $D/tiny/tiny-qwen2-q8_0.gguf "$S/tiny-qwen2-q8_0" >> "$WORK/models.log" 2>&1
  $NICE "$SPLIT" --split --split-max-tensors 14 --no-tensor-first-split $D/tiny/tiny-qwen2-q2_k.gguf "$S/tiny-qwen2-q2_k-meta1" >> "$WORK/models.log" 2>&1
  for f in "$S"/*.gguf; do echo "$D/splits/$(basename "$f")" >> "$PRODUCED"; done
fi

# ---- report
REPORT=$OUT/report.txt
sort -u "$PRODUCED" -o "$PRODUCED"
mapfile -t FILES < "$PRODUCED"
$PY $G/compare.py "$OUT" "$ROOT" "${FILES[@]}" | tee "$REPORT"
n_same=$(grep -c ' identical$' "$REPORT" || true)
echo "$n_same of ${#FILES[@]} regenerated files are identical to the committed ones; report: $REPORT"
if [ $IN_PLACE = 1 ]; then
  # files whose content differs (not those equal up to gzip headers, formatting or the producer path)
  mapfile -t CHANGED < <(awk '$2 == "differs" || $2 == "differs:" || $2 == "new" { print $1 }' "$REPORT")
  for f in "${CHANGED[@]}"; do cp "$OUT/$f" "$ROOT/$f"; done
  echo "copied ${#CHANGED[@]} differing files into the working tree (git diff to review)"
fi
