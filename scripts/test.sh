#!/usr/bin/env bash
# Runs every check CI runs: formatting, lints, and the whole test suite.
# Usage: scripts/test.sh        (from anywhere inside the repository)
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== cargo fmt --check"
cargo fmt --all --check

echo "== cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings

echo "== cargo test"
cargo test --workspace --locked
