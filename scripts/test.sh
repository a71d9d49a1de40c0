#!/usr/bin/env bash
# The whole test suite: fetches the real models (cached outside git), builds the release
# library (the C harness links it), then runs every Rust, golden, real-model, guarantee and C
# test, and each fuzz target for a minute.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each stage's start, as minutes:seconds since the script began (CI's log shows where time goes).
stage() { printf '== [%d:%02d] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*"; }
stage "fetch models"
scripts/fetch-models.sh smollm2 qwen05
stage "release build"
cargo build --release
ln -sfn libdeepseek.so target/release/libdeepseek.so.0  # the SONAME that linked programs load
# The library valgrind checks: the system allocator instead of jemalloc, so memcheck sees
# every allocation (tests/c_harness.rs).
stage "memcheck build"
cargo build --profile memcheck --no-default-features --lib
ln -sfn libdeepseek.so target/memcheck/libdeepseek.so.0
# The tests run in the `ci` profile (Cargo.toml: release code without fat LTO, which would
# re-optimize the library into each of ~40 test binaries).
stage "tests (ci profile)"
cargo test --profile ci --no-run -q
# deepseek-cli (its own workspace crate, so the root's tests do not build it): the CLI that
# tests/llama_cpp_python.rs and the server's tests compare with, from target/ci/.
cargo build --profile ci -p deepseek-cli -q
# The two long single-test binaries run beside the others, each in its own process: the soak
# measures only its own process's memory, registration only its own allocations, so neither is
# disturbed by the tests running at the same time (they would be inside one process).
long_tests=(soak registration)
rm -f target/test-long.failed
( for t in "${long_tests[@]}"; do
    cargo test --profile ci --test "$t" > "target/test-$t.log" 2>&1 || { echo "$t" >> target/test-long.failed; }
  done ) &
long_pid=$!
cargo test --profile ci -- --test-threads 2 --skip create_use_free_returns_everything --skip repeated_decodes_neither_grow_metadata_nor_allocate
wait "$long_pid"
for t in "${long_tests[@]}"; do
  grep -E "^test |test result" "target/test-$t.log" || true
done
if [ -f target/test-long.failed ]; then
  for t in $(cat target/test-long.failed); do cat "target/test-$t.log"; done
  echo "failed: $(cat target/test-long.failed)" >&2
  exit 1
fi
# The fidelity tests again with lower kernel levels forced (src/kernels/simd), so the AVX2 and
# scalar paths stay right on a machine that would pick AVX-512. (The real models with scalar
# kernels take minutes; they run at the AVX2 level.)
# On a machine without the AVX-512 level the run above already was the AVX2 run.
if grep -qw avx512f /proc/cpuinfo && grep -qw avx512bw /proc/cpuinfo && grep -qw avx512vl /proc/cpuinfo && grep -qw avx512_vnni /proc/cpuinfo; then
  DEEPSEEK_KERNELS=avx2 cargo test --profile ci --test golden_logits --test golden_quants --test engine --test real_models --test kv_types
else
  echo "== no AVX-512 level here: the tests above ran at the AVX2 level"
fi
stage "scalar reruns"
DEEPSEEK_KERNELS=scalar cargo test --profile ci --test golden_logits --test golden_quants --test engine --test kv_types
# The chat crate, deepseek-cli and deepseek-server (workspace crates of their own): unit tests,
# the CLI on the tiny fixtures, then the real openai client against the server.
# After the reruns above: their builds resolve the shared dependencies' features without the
# root crate's dev-dependencies, and a root test run after them was seen to rebuild the library.
stage "deepseek-chat, deepseek-cli, deepseek-server"
cargo test --profile ci -p deepseek-chat
cargo test --profile ci -p deepseek-cli
cargo test --profile ci -p deepseek-server
# llama-server b11312's own server tests with deepseek-server as the server: the files whose
# outcome does not hang on sampled text (the whole suite: scripts/check-upstream-suites.sh
# server-ours), held to tests/upstream/server-ours-expected-failures.txt.
stage "llama-server's suite on deepseek-server (quick)"
scripts/check-upstream-suites.sh server-ours-quick
# The serving engine's lock-free parts model-checked with loom (src/engine/loom_tests.rs).
stage "loom"
scripts/loom.sh
# Every fuzz target for 60 s, after replaying its committed regression inputs (docs/FUZZING.md).
stage "fuzz"
scripts/fuzz.sh 60
stage "done"
