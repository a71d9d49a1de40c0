#!/usr/bin/env bash
# Installs deepseek into PREFIX (default /usr/local): builds the release library, then writes
#   PREFIX/lib/libdeepseek.so.VERSION (+ libdeepseek.so.0 -> it, the SONAME; libdeepseek.so -> .so.0)
#   PREFIX/lib/libdeepseek.a
#   PREFIX/include/llama.h, PREFIX/include/deepseek.h
#   PREFIX/lib/pkgconfig/deepseek.pc
#   PREFIX/lib/cmake/deepseek/deepseekConfig.cmake, deepseekConfigVersion.cmake
# usage: scripts/install.sh [PREFIX]    (DESTDIR is honoured, as for `make install`;
#        DEEPSEEK_LIB_DIR=DIR installs the libraries already built in DIR instead of running cargo)
set -euo pipefail
cd "$(dirname "$0")/.."
PREFIX=$(realpath -m "${1:-/usr/local}")
DEST=${DESTDIR:-}$PREFIX
VERSION=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
ABI_MAJOR=0  # the SONAME's number (build.rs: -soname libdeepseek.so.0)
# What the Rust runtime inside libdeepseek.a needs from the system
# (`cargo rustc --release --lib --crate-type staticlib -- --print native-static-libs`);
# tests/packaging.rs links a static consumer with exactly these.
NATIVE_LIBS="-lgcc_s -lutil -lrt -lpthread -lm -ldl -lc"

if [ -n "${DEEPSEEK_LIB_DIR:-}" ]; then
  OUT=$DEEPSEEK_LIB_DIR
else
  cargo build --release --lib
  OUT=${CARGO_TARGET_DIR:-target}/release
fi

install -d "$DEST/lib/pkgconfig" "$DEST/lib/cmake/deepseek" "$DEST/include"
install -m 755 "$OUT/libdeepseek.so" "$DEST/lib/libdeepseek.so.$VERSION"
ln -sfn "libdeepseek.so.$VERSION" "$DEST/lib/libdeepseek.so.$ABI_MAJOR"
ln -sfn "libdeepseek.so.$ABI_MAJOR" "$DEST/lib/libdeepseek.so"
# The archive from cargo is a bundle of Rust objects: the library, std, compiler_builtins. Its
# global symbols include Rust's runtime (rust_eh_personality: another Rust static library in the
# same program would clash) and compiler_builtins' weak libm functions (sqrt, fma, ... would
# replace libm's for the whole program), and its objects carry LLVM bitcode (.llvmbc, for
# Rust-side LTO) that binutils' LTO plugin tries and fails to read. The installed archive is
# one relocatable object linked from all of them, with the bitcode dropped and every global
# symbol but the C API made local.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
ld -r --whole-archive "$OUT/libdeepseek.a" -o "$work/deepseek.o"
objcopy --remove-section=.llvmbc --remove-section=.llvmcmd "$work/deepseek.o"
nm -g --defined-only "$work/deepseek.o" | awk '$3 ~ /^(llama|ggml|ds)_/ || $3 ~ /^_Z[0-9]+llama_/ { print $3 }' > "$work/api.txt"
objcopy --keep-global-symbols="$work/api.txt" "$work/deepseek.o"
rm -f "$DEST/lib/libdeepseek.a"
ar rcs "$DEST/lib/libdeepseek.a" "$work/deepseek.o"
chmod 644 "$DEST/lib/libdeepseek.a"
install -m 644 include/llama.h include/deepseek.h "$DEST/include/"

fill() {  # template -> file, substituting the @DS_*@ placeholders
  sed -e "s|@DS_PREFIX@|$PREFIX|g" -e "s|@DS_VERSION@|$VERSION|g" -e "s|@DS_ABI_MAJOR@|$ABI_MAJOR|g" \
      -e "s|@DS_NATIVE_LIBS@|$NATIVE_LIBS|g" -e "s|@DS_NATIVE_LIBS_CMAKE@|$(echo "$NATIVE_LIBS" | sed 's/-l//g; s/ /;/g')|g" \
      "$1" > "$2"
  if grep -q "@DS_" "$2"; then echo "unfilled placeholder in $2" >&2; exit 1; fi
}
fill cmake/deepseek.pc.in "$DEST/lib/pkgconfig/deepseek.pc"
fill cmake/deepseekConfig.cmake.in "$DEST/lib/cmake/deepseek/deepseekConfig.cmake"
fill cmake/deepseekConfigVersion.cmake.in "$DEST/lib/cmake/deepseek/deepseekConfigVersion.cmake"
echo "installed deepseek $VERSION into $DEST"
