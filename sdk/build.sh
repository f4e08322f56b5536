#!/bin/sh
# Builds Zorilla's MPI library for WebAssembly workers from source:
# sdk/src/*.c -> sdk/lib/libzmpi.a (wasm32-wasi objects archived by llvm-ar;
# GNU ar cannot write the symbol index the wasm linker needs).
#
# Needs Debian's clang 14 for WebAssembly:
#   apt-get install -y clang lld llvm wasi-libc libclang-rt-14-dev-wasm32
# Environment: CC (default clang), AR (default llvm-ar, else llvm-ar-14),
# ZMPI_FRAGMENT (bytes per transport message, header included),
# ZMPI_SYSROOT (default /usr; headers from the WebAssembly C library only,
# with sdk/wasi before it, as bin/zmpicc does).
set -eu
sdk="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$sdk")"
CC="${CC:-clang}"
sysroot="${ZMPI_SYSROOT:-/usr}"
if [ -z "${AR:-}" ]; then
    if command -v llvm-ar >/dev/null 2>&1; then AR=llvm-ar; else AR=llvm-ar-14; fi
fi
out="$sdk/lib"
mkdir -p "$out"
# A directory of its own, so that builds running at once do not collide;
# the archive is renamed into place whole.
obj="$(mktemp -d "$out/build.XXXXXX")"
trap 'rm -rf "$obj"' EXIT
extra=""
if [ -n "${ZMPI_FRAGMENT:-}" ]; then extra="-DZMPI_FRAGMENT=$ZMPI_FRAGMENT"; fi
for src in "$sdk"/src/*.c; do
    name=$(basename "$src" .c)
    # shellcheck disable=SC2086
    "$CC" --target=wasm32-wasi --sysroot="$sysroot" -nostdlibinc -isystem "$sdk/wasi" \
        -isystem "$sysroot/include/wasm32-wasi" -O2 -Wall -Wextra -Werror $extra \
        -I "$sdk/include" -I "$root/examples/include" -c -o "$obj/$name.o" "$src"
done
"$AR" rcs "$obj/libzmpi.a" "$obj"/*.o
mv "$obj/libzmpi.a" "$out/libzmpi.a"
echo "built $out/libzmpi.a"
