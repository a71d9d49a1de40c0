#!/usr/bin/env bash
# Regenerates this folder's goldens with llama.cpp b11312 (embed.c; scripts/regenerate-references.sh's
# `embeddings` stage), writing them into the working tree.
# usage: tests/data/embeddings/gen.sh [/path/to/llama.cpp/build]  (models: tests/data, fetched smollm2;
#        LLAMA_CPP_SRC = its source tree, else the script's download)
set -euo pipefail
cd "$(dirname "$0")/../../.."
exec env ${1:+UPSTREAM_BUILD=$1} scripts/regenerate-references.sh --in-place embeddings
