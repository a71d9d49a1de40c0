#!/usr/bin/env bash
# Model-checks the library's lock-free parts with loom: the serving engine's submission queue,
# event rings and epoch-published request table (src/engine/loom_tests.rs), the thread pool's
# job publication, slot claims, done count, wake-ups and run_chunks shares
# (src/threads/loom_tests.rs), and the KV cache's epoch-published sequence table
# (src/kv/loom_tests.rs), crossbeam-epoch's atomics included (--cfg crossbeam_loom). Its own
# target directory: the flags rebuild everything.
set -euo pipefail
cd "$(dirname "$0")/.."
export RUSTFLAGS="--cfg loom --cfg crossbeam_loom"
# No preemption bound unless LOOM_MAX_PREEMPTIONS is set: every interleaving is explored, except
# in the two models too large for that (the pool's three-thread job: at most 4 preemptions; the
# sequence table: at most 3), which LOOM_MAX_PREEMPTIONS also overrides.
cargo test --profile ci --lib --no-default-features --features loom --target-dir target/loom -- engine::loom_tests threads::loom_tests kv::loom_tests --test-threads 2 "$@"
