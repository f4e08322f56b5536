#!/bin/sh
# Builds the OSU Micro-Benchmarks (7.x; BSD licence, not part of this
# repository) for Zorilla with zmpicc, from their unchanged sources, the
# way their Makefiles do: every benchmark linked with the shared helper
# (c/util). Prints which built and, for the others, zmpicc's reason.
#   sdk/tests/osu.sh OSU_DIR OUT_DIR
# OSU_DIR is an unpacked osu-micro-benchmarks-7.x; OUT_DIR receives
# NAME.wasm (and NAME.err when zmpicc refused it). CUDA, OpenACC and ROCm
# parts stay out, as their configure leaves them without --enable-cuda etc.
# Run one on a grid with e.g.
#   zorilla submit --mpi --workers 2 --module OUT_DIR/osu_latency.wasm --follow
#
# Their own configure works too, told what it cannot find out:
#   ./configure CC=zmpicc CXX=zmpicc --host=wasm32-unknown-none \
#       ac_cv_func_MPI_Init=yes ac_cv_func_MPI_Accumulate=yes \
#       ac_cv_func_MPI_Get_accumulate=yes
#   make -k
# (config.sub does not know wasm32-wasi; autoconf's link checks call each
# function with a made-up signature, which zmpicc refuses as it would
# trap; make -k goes on past the benchmarks zmpicc refuses.)
set -u
if [ $# -ne 2 ]; then
    echo "usage: $0 OSU_DIR OUT_DIR" >&2
    exit 2
fi
src="$1"
out="$2"
zmpicc="$(cd "$(dirname "$0")/.." && pwd)/bin/zmpicc"
util="$src/c/util"
if [ ! -f "$util/osu_util_mpi.c" ]; then
    echo "$src does not look like the OSU Micro-Benchmarks 7.x (no c/util/osu_util_mpi.c)" >&2
    exit 2
fi
mkdir -p "$out/util"
status=0
for f in osu_util osu_util_mpi osu_util_graph osu_util_papi osu_util_validation; do
    if ! "$zmpicc" -O2 -I "$util" -c -o "$out/util/$f.o" "$util/$f.c" 2>"$out/util/$f.err"; then
        cat "$out/util/$f.err" >&2
        echo "the shared helper $f.c does not build" >&2
        exit 1
    fi
done
built=0
refused=0
for bench in $(find "$src/c/mpi" -name 'osu_*.c' ! -path '*/utils/*' | sort); do
    name=$(basename "$bench" .c)
    set --
    case "$bench" in
        */congestion/*) set -- -I "$src/c/mpi/pt2pt/congestion/utils" \
                               "$src/c/mpi/pt2pt/congestion/utils/osu_bw_fan_util.c" ;;
    esac
    if "$zmpicc" -O2 -I "$util" "$@" -o "$out/$name.wasm" "$bench" "$out"/util/*.o -lm \
        2>"$out/$name.err"; then
        rm -f "$out/$name.err"
        echo "built    $name"
        built=$((built + 1))
    else
        reason=$(grep -m 1 -E "error|zmpicc:" "$out/$name.err" | sed 's/^.*error: //')
        echo "refused  $name: $reason"
        refused=$((refused + 1))
        status=1
    fi
done
echo "$built built, $refused refused"
exit $status
