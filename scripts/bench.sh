#!/usr/bin/env bash
# Runs every benchmark of the project, then rewrites the summary table of
# BENCHMARKS.md and the plots in docs/bench/ (sim/src/bin/bench-report.rs).
#
#   scripts/bench.sh           the full run (release builds, ~15 minutes)
#   scripts/bench.sh --short   CI's run: debug builds, small sizes, the
#                              report written to out/bench/BENCHMARKS.md
#                              (a copy) so that the committed figures stay
#                              those of a full run; it checks that every
#                              benchmark still runs and reports.
set -euo pipefail
cd "$(dirname "$0")/.."
short=false
[[ "${1:-}" == "--short" ]] && short=true
logs=out/bench/logs
rm -rf "$logs" && mkdir -p "$logs"

if $short; then
    # The test profile: the artifacts `cargo test --workspace` just built.
    profile=(--profile test)
    export ZORILLA_BENCH_SHORT=1 ZORILLA_BENCH_NODES=12 ZORILLA_BENCH_FLOODS=5
    sim_target=debug
    scenarios=(zorilla-4.2)
    sim_args=(--seeds 1)
    markdown=out/bench/BENCHMARKS.md
    svg_dir=out/bench/plots
    cp BENCHMARKS.md "$markdown"
    kind="short run, debug build: sizes reduced, not comparable"
else
    profile=()
    sim_target=release
    scenarios=(zorilla-4.2 zorilla-671 p2pmpi-table1 synthetic-10k)
    sim_args=()
    markdown=BENCHMARKS.md
    svg_dir=docs/bench
    kind="full run, release build, $(date -u +%Y-%m-%d), $(nproc) cores${BENCH_NOTE:+; $BENCH_NOTE}"
fi

sim_profile=()
[[ $sim_target == release ]] && sim_profile=(--release)
cargo build --locked "${sim_profile[@]}" -p zorilla-sim --bins
for scenario in "${scenarios[@]}"; do
    echo "== simulator: $scenario"
    "${CARGO_TARGET_DIR:-target}/$sim_target/zorilla-sim" "sim/scenarios/$scenario.toml" "${sim_args[@]}" \
        --out out/sim | tee "$logs/sim-$scenario.log"
done

run_bench() { # package bench
    echo "== cargo bench -p $1 --bench $2"
    # --workspace, not -p: the same features as the test build, so no
    # dependency is built a second time.
    cargo bench --locked "${profile[@]}" --workspace --bench "$2" | tee "$logs/$1-$2.log"
}
run_bench zorilla-overlay flood
run_bench zorilla-overlay connect
run_bench zorilla-sandbox sandbox
run_bench zorilla-sandbox compute
run_bench zorilla-node speedup
run_bench zorilla-node client
run_bench zorilla-node start64
run_bench zorilla-node store
run_bench zorilla-node mpi
run_bench zorilla-node pingpong
run_bench zorilla-node checkpoint
run_bench zorilla-node failover
run_bench zorilla-node realnet

"${CARGO_TARGET_DIR:-target}/$sim_target/bench-report" --logs "$logs" --markdown "$markdown" \
    --svg-dir "$svg_dir" --kind "$kind"
