#!/usr/bin/env bash
# Zorilla's main job in one command: builds the node, the zorilla tool and
# the demo (release), then runs the demo: 12 nodes on loopback in three
# emulated sites, a 16-worker nqueens job with a progress bar, the answer,
# where the workers ran, and a clean shutdown. Arguments go to zorilla-demo
# (--queens N, --workers N, --keep, --closed: a closed grid, with a grid
# key and a membership credential for each node made by the demo).
set -euo pipefail
cd "$(dirname "$0")/.."
# The whole workspace, as `cargo build --release --workspace` builds it: a
# build of the node's package alone turns other features of the crates it
# shares with the rest on (zorilla-overlay's `default`), so that each of
# the two builds would compile them again after the other.
cargo build --release --locked --workspace
exec "${CARGO_TARGET_DIR:-target}/release/zorilla-demo" "$@"
