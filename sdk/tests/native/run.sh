#!/bin/sh
# Debugging aid: builds prog.c natively against the MPI library and a fake
# host (fakezorilla.c) and runs it with N ranks:  run.sh N prog.c [args]
# ZMPI_FRAGMENT (default 4096 here, to exercise fragmentation) and CFLAGS
# (e.g. -fsanitize=address) can be set.
set -eu
here="$(cd "$(dirname "$0")" && pwd)"
sdk="$(dirname "$(dirname "$here")")"
n="$1"; prog="$2"; shift 2
out="$(mktemp -d)"
cc -g -O1 ${CFLAGS:-} -DZMPI_FRAGMENT="${ZMPI_FRAGMENT:-4096}" -Wno-unknown-attributes -Wno-attributes \
    -I "$sdk/include" -I "$sdk/../examples/include" -I "$sdk/src" \
    -o "$out/prog" "$prog" "$sdk"/src/*.c "$here/fakezorilla.c" -lm
mkdir -p "$out/sock"
# A namespace of our own, where the datagram queue can hold 256 messages
# like the sandbox's inbox (the host default is 10).
status=0
unshare -n sh -c '
    sysctl -q -w net.unix.max_dgram_qlen=256
    n=$1; out=$2; shift 2
    pids=""
    r=0
    while [ "$r" -lt "$n" ]; do
        ZF_RANK=$r ZF_SIZE=$n ZF_DIR="$out/sock" "$out/prog" "$@" > "$out/out.$r" 2>&1 &
        pids="$pids $!"
        r=$((r + 1))
    done
    status=0
    for p in $pids; do wait "$p" || status=1; done
    exit $status' sh "$n" "$out" "$@" || status=1
r=0
while [ "$r" -lt "$n" ]; do cat "$out/out.$r"; r=$((r + 1)); done
rm -rf "$out"
exit $status
