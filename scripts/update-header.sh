#!/usr/bin/env bash
# Regenerates include/deepseek.h from the Rust sources (what tests/header.rs checks).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --lib -q
gen=$(ls -td target/release/build/deepseek-*/out/deepseek.h | head -n 1)
cp "$gen" include/deepseek.h
echo "include/deepseek.h updated from $gen"
