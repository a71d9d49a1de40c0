#!/usr/bin/env bash
# One markdown line for a benchmark report: the kernel level libdeepseek runs in this
# environment (its llama_print_system_info: the CPU's best level, capped by DEEPSEEK_KERNELS)
# and the CPU's SIMD flags. The bench/*.sh that write bench/results/ print it.
# usage: bench/kernel_level.sh [LIB=target/release/libdeepseek.so]
set -euo pipefail
LIB="${1:-${CARGO_TARGET_DIR:-target}/release/libdeepseek.so}"
python3 - "$LIB" <<'PY'
import ctypes, os, sys
lib = ctypes.CDLL(os.path.abspath(sys.argv[1]))
lib.llama_print_system_info.restype = ctypes.c_char_p
info = lib.llama_print_system_info().decode()
key = "deepseek kernels = "
level = info.split(key, 1)[1].split(" ", 1)[0] if key in info else "unknown"
flags = next((l.split(":", 1)[1].split() for l in open("/proc/cpuinfo") if l.startswith("flags")), [])
isa = " ".join(f for f in flags if f.startswith(("avx", "fma", "f16c", "gfni", "vpclmul", "vaes")) or "vnni" in f)
print(f"- deepseek kernels: {level} (DEEPSEEK_KERNELS={os.environ.get('DEEPSEEK_KERNELS', 'unset')}); CPU SIMD flags: {isa or 'none'}")
PY
