#!/usr/bin/env bash
# Zorilla's main job in one command: builds the node, the zorilla tool and
# the demo (release), then runs the demo: 12 nodes on loopback in three
# emulated sites, a 16-worker nqueens job with a progress bar, the answer,
# where the workers ran, and a clean shutdown. Arguments go to zorilla-demo
# (--queens N, --workers N, --keep, --closed: a closed grid, with a grid
# key and a membership credential for each node made by the demo).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked -p zorilla-node --bins
exec "${CARGO_TARGET_DIR:-target}/release/zorilla-demo" "$@"
