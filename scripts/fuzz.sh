#!/usr/bin/env bash
# Builds the fuzz targets (libFuzzer + AddressSanitizer, as `cargo fuzz build -O` does) and runs
# each for SECONDS: first every committed regression input (tests/data/regressions/TARGET) and
# the committed corpus once, then new inputs, with a 10 s hang limit. New corpus entries go to
# target/fuzz-corpus (copy the ones that matter into fuzz/corpus). Fails on any crash, hang,
# leak or sanitizer report, on any other non-zero exit of the fuzzer, and when a target ran
# fewer than FUZZ_MIN_RUNS (200) executions (a fuzzer that never really started).
# usage: scripts/fuzz.sh [SECONDS] [TARGET...]   (default 60 s, every target)
#        FUZZ_CAMPAIGN=1 scripts/fuzz.sh 7200 TARGET   (10 M executions or 2 h of CPU time)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(gguf_model tokenizer chat_template api_sequence grammar)
triple=x86_64-unknown-linux-gnu
# cargo-fuzz's flags; -Zsanitizer needs RUSTC_BOOTSTRAP on a stable toolchain.
export RUSTC_BOOTSTRAP=1
export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 -Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table -Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing -Cllvm-args=-simplifycfg-branch-fold-threshold=0 -Zsanitizer=address -Cllvm-args=-sanitizer-coverage-stack-depth -Ccodegen-units=1"
export ASAN_OPTIONS=detect_odr_violation=0
cargo build --release --manifest-path fuzz/Cargo.toml --target "$triple" --bins
# cargo puts them under CARGO_TARGET_DIR when that is set (as for the main crate), else fuzz/target
bin=${CARGO_TARGET_DIR:-fuzz/target}/$triple/release
for t in "${targets[@]}"; do
  [ -x "$bin/$t" ] || { echo "fuzz target $t was not built ($bin/$t is missing)" >&2; exit 1; }
done
declare -A max_len=([gguf_model]=262144 [tokenizer]=65536 [chat_template]=16384 [api_sequence]=16384 [grammar]=8192)
# One target: its regression inputs, then the run (or campaign) and its checks.
one_target() {
  local t=$1
  if [ -d "tests/data/regressions/$t" ]; then
    if ! "$bin/$t" -runs=0 "tests/data/regressions/$t"/* > "target/fuzz-regressions-$t.log" 2>&1; then
      cat "target/fuzz-regressions-$t.log" >&2
      echo "fuzz target $t fails on a committed regression input" >&2
      return 1
    fi
    echo "== $t: $(ls tests/data/regressions/$t | wc -l) regression inputs pass"
  fi
  work=target/fuzz-corpus/$t
  rm -rf "target/fuzz-artifacts/$t"
  mkdir -p "$work" "target/fuzz-artifacts/$t"
  seeds=()
  [ -d "fuzz/corpus/$t" ] && seeds=("fuzz/corpus/$t")
  log=target/fuzz-$t.log
  if [ "${FUZZ_CAMPAIGN:-0}" = 1 ]; then
    # A campaign: up to 10 million executions or SECONDS of the fuzzer's own CPU time, whichever
    # comes first. CPU time, not wall time, so that a campaign sharing the cores with builds still
    # gets its whole budget; libFuzzer prints its final stats when interrupted.
    echo "== $t: campaign, 10,000,000 executions or ${seconds} s of CPU time ($log)"
    # The hang limit is wall time: a campaign shares the cores, so it gets 30 s (CI's runs 10).
    "$bin/$t" "$work" "${seeds[@]}" -runs=10000000 -max_total_time=$((seconds * 4)) -timeout=30 \
      -rss_limit_mb=4096 -max_len="${max_len[$t]}" -artifact_prefix="target/fuzz-artifacts/$t/" \
      -print_final_stats=1 > "$log" 2>&1 &
    pid=$!
    tick=$(getconf CLK_TCK)
    while kill -0 "$pid" 2>/dev/null; do
      cpu=$(awk -v tick="$tick" '{ print int(($14 + $15) / tick) }' "/proc/$pid/stat" 2>/dev/null || echo 0)
      if [ "$cpu" -ge "$seconds" ]; then kill -INT "$pid"; break; fi
      sleep 5
    done
    wait "$pid" || true
    # libFuzzer separates the count from the event with a tab
    grep -E "^#[0-9]+[[:space:]]+(pulse|NEW|REDUCE|DONE)" "$log" | tail -1 || true
  else
    echo "== $t: ${seconds} s"
    rc=0
    "$bin/$t" "$work" "${seeds[@]}" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 \
      -max_len="${max_len[$t]}" -artifact_prefix="target/fuzz-artifacts/$t/" -print_final_stats=1 \
      > "$log" 2>&1 || rc=$?
    # libFuzzer exits 0 when its time is up; anything else (a crash, a leak, an error before it
    # started) fails, as does a run too short to have fuzzed anything.
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    if [ "$rc" -ne 0 ] || [ "${runs:-0}" -lt "${FUZZ_MIN_RUNS:-200}" ]; then
      tail -60 "$log" >&2
      echo "fuzz target $t: exit status $rc after ${runs:-no} executions (at least ${FUZZ_MIN_RUNS:-200} expected)" >&2
      return 1
    fi
    echo "== $t: ${runs} executions"
  fi
  grep -E "^(#[0-9]+[[:space:]]+DONE|stat::number_of_executed_units|stat::peak_rss_mb|Done)|ERROR|SUMMARY|panicked|deadly|interrupted" "$log" || true
  if ls "target/fuzz-artifacts/$t"/* >/dev/null 2>&1; then
    tail -60 "$log" >&2
    echo "fuzz target $t found a failure: $(ls target/fuzz-artifacts/$t)" >&2
    return 1
  fi
}

# Targets run two at a time (each fuzzer is one thread; FUZZ_JOBS=1 for one at a time, as
# campaigns do), each one's output printed when its pair is done.
jobs_at_once=${FUZZ_JOBS:-2}
[ "${FUZZ_CAMPAIGN:-0}" = 1 ] && jobs_at_once=1
failed=()
for ((i = 0; i < ${#targets[@]}; i += jobs_at_once)); do
  batch=("${targets[@]:i:jobs_at_once}")
  pids=()
  for t in "${batch[@]}"; do
    ( one_target "$t" ) > "target/fuzz-out-$t.txt" 2>&1 &
    pids+=($!)
  done
  for j in "${!batch[@]}"; do
    rc=0
    wait "${pids[$j]}" || rc=$?
    cat "target/fuzz-out-${batch[$j]}.txt"
    [ "$rc" -eq 0 ] || failed+=("${batch[$j]}")
  done
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz targets failed: ${failed[*]}" >&2
  exit 1
fi
