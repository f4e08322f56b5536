#!/bin/sh
# Rebuilds the example guests: examples/src/*.c -> examples/wasm/*.wasm.
#
# Needs Debian's clang 14 for WebAssembly:
#   apt-get install -y clang lld wasi-libc libclang-rt-14-dev-wasm32
# The built .wasm files are committed, so running the demo and the tests
# does not need a compiler; run this after changing a guest and commit the
# result.
set -eu
cd "$(dirname "$0")"
CC="${CC:-clang}"
mkdir -p wasm
for src in src/*.c; do
    name=$(basename "$src" .c)
    "$CC" --target=wasm32-wasi --sysroot=/usr -O2 -Wall -Wextra -Werror \
        -Wl,--strip-debug -I include -o "wasm/$name.wasm" "$src"
    echo "built wasm/$name.wasm ($(wc -c < "wasm/$name.wasm") bytes)"
done
