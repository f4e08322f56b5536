#!/usr/bin/env bash
# Runs every check CI runs: installs the Debian packages the tests need (if
# missing), checks that the committed guest modules rebuild identically from
# their C sources, then formatting, lints and the whole test suite (and
# the Python client's tests, and lints and the QUIC tests of a build
# without QUIC).
# Usage: scripts/test.sh        (from anywhere inside the repository)
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-test-deps.sh
# rustfmt and clippy are rustup components that a minimal toolchain lacks.
if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
  command -v rustup >/dev/null 2>&1 || { echo "cargo fmt and cargo clippy are needed (rustup component add rustfmt clippy)" >&2; exit 1; }
  rustup component add rustfmt clippy
fi

echo "== examples/wasm rebuild identically from examples/src"
check_dir=$(mktemp -d)
trap 'rm -rf "$check_dir"' EXIT
cp -r examples "$check_dir/"
"$check_dir/examples/build.sh" >/dev/null
for built in "$check_dir"/examples/wasm/*.wasm; do
  name=$(basename "$built")
  if ! cmp -s "$built" "examples/wasm/$name"; then
    echo "examples/wasm/$name differs from what examples/src builds to: run examples/build.sh and commit" >&2
    exit 1
  fi
done

echo "== no module depends on a module that depends back on it"
python3 scripts/module-cycles.py

echo "== no C file of the MPI library (sdk/src) uses one that uses it back"
python3 scripts/c-cycles.py

echo "== every file and test docs/security.md names exists"
python3 scripts/check-security-doc.py

echo "== every command BENCHMARKS.md names runs in scripts/bench.sh"
python3 scripts/check-bench-commands.py

echo "== every path and item docs/ARCHITECTURE.md and README's diagram name exists, every module is on its crate's front page"
python3 scripts/check-architecture.py

echo "== cargo fmt --check"
cargo fmt --all --check

echo "== cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings

echo "== cargo test"
cargo test --workspace --locked

# With the debug binaries cargo test built: the Python client installed
# with pip into a virtual environment, and its tests against real nodes.
echo "== the Python client (sdk/python/run-tests.sh)"
sdk/python/run-tests.sh

# A lying node is a test-only cargo feature (`test-corrupt`): no node built
# without it can be told to lie. Its one test builds the node with it.
echo "== replicated jobs beside a lying node (cargo feature test-corrupt)"
cargo test --workspace --locked --features zorilla-node/test-corrupt --test replicated

# QUIC is a cargo feature (`quic`, on by default): the build without it
# must compile, lint clean and refuse QUIC. Only the QUIC tests of the
# overlay run here (a minute or two); the node's unit tests without the
# feature would rebuild wasmtime (7.5 min), and the node's check
# (config::check_quic) is tested for both builds in every build.
echo "== without QUIC (cargo feature quic off)"
cargo clippy -p zorilla-node -p zorilla-overlay --no-default-features --all-targets --locked -- -D warnings
cargo test -p zorilla-overlay --no-default-features --locked --lib --test overlay -- quic dialable

echo "== benchmarks, short run (scripts/bench.sh --short)"
scripts/bench.sh --short

# The summary and the README's headline figures are generated: exactly
# what bench-report makes from the committed logs of the last full run.
echo "== BENCHMARKS.md's summary and README's headline are scripts/bench.sh's"
"${CARGO_TARGET_DIR:-target}/debug/bench-report" --check --logs docs/bench/logs \
  --markdown BENCHMARKS.md --readme README.md

# What the build left on disk: a CI machine ran out of it once (over 40 GB
# of test binaries with full debug info).
echo "== target/ takes $(du -sh target 2>/dev/null | cut -f1)"
