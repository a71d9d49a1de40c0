#!/usr/bin/env bash
# Model-checks the serving engine's lock-free parts (src/engine/loom_tests.rs) with loom: the
# submission queue, the event rings and the epoch-published request table, crossbeam-epoch's
# atomics included (--cfg crossbeam_loom). Its own target directory: the flags rebuild
# everything.
set -euo pipefail
cd "$(dirname "$0")/.."
export RUSTFLAGS="--cfg loom --cfg crossbeam_loom"
# No preemption bound unless LOOM_MAX_PREEMPTIONS is set: every interleaving is explored.
cargo test --profile ci --lib --no-default-features --features loom --target-dir target/loom -- engine::loom_tests --test-threads 2 "$@"
