#!/usr/bin/env bash
# Regenerates this directory's goldens (list.txt: model under tests/data, type_k, type_v as ggml
# type ids, the golden's suffix) and the quantized-cache greedy references of the real models
# with llama.cpp b11312: the kv-types stage of scripts/regenerate-references.sh (golden.c built
# with golden_kv.h, which gives its contexts the cache types of GOLDEN_TYPE_K / GOLDEN_TYPE_V
# and flash attention on). Arguments are passed on (e.g. --in-place).
set -euo pipefail
cd "$(dirname "$0")/../../.."
exec scripts/regenerate-references.sh kv-types "$@"
