#!/usr/bin/env bash
# Tests the Python client as its users install it: a virtual environment
# seeing the system's packages (Debian's python3-cbor2 and
# python3-cryptography; scripts/install-test-deps.sh installs them), then
# `pip install ./sdk/python` into it (nothing downloaded), then its tests
# (sdk/python/tests, unittest) against real nodes: the debug binaries
# zorilla-node and zorilla in ${CARGO_TARGET_DIR:-target}/debug, which
# `cargo test --workspace` (scripts/test.sh) or
# `cargo build -p zorilla-node --bins` builds.
# Usage: sdk/python/run-tests.sh [UNITTEST ARGS...]   (from anywhere)
set -euo pipefail
cd "$(dirname "$0")/../.."

bin_dir="${CARGO_TARGET_DIR:-target}/debug"
case "$bin_dir" in /*) ;; *) bin_dir="$PWD/$bin_dir" ;; esac
for bin in zorilla-node zorilla; do
  [ -x "$bin_dir/$bin" ] || { echo "no $bin_dir/$bin: build it with cargo build -p zorilla-node --bins" >&2; exit 1; }
done

# Debian's Python, whose site packages the Debian packages fill (a python3
# earlier on PATH, such as pyenv's, does not see them).
python=/usr/bin/python3
[ -x "$python" ] || python=$(command -v python3)
if ! "$python" -c 'import cbor2, cryptography, ensurepip, setuptools, wheel' 2>/dev/null; then
  echo "$python lacks cbor2, cryptography, venv, setuptools or wheel: run scripts/install-test-deps.sh" \
       "(python3-cbor2 python3-cryptography python3-venv python3-setuptools python3-wheel)" >&2
  exit 1
fi

venv=$(mktemp -d)
trap 'rm -rf "$venv"' EXIT
"$python" -m venv --system-site-packages "$venv"
# --no-build-isolation: build with the system's setuptools rather than
# download one; --no-index --no-deps: the dependencies are the system's.
"$venv/bin/pip" install --quiet --disable-pip-version-check --no-build-isolation --no-index --no-deps ./sdk/python
# The tests import the installed package, not the checkout's.
(cd / && "$venv/bin/python" -c 'import sys, zorilla; assert zorilla.__file__.startswith(sys.prefix), zorilla.__file__')

ZORILLA_BIN_DIR="$bin_dir" PYTHONDONTWRITEBYTECODE=1 \
  "$venv/bin/python" -m unittest discover -s sdk/python/tests -t sdk/python/tests "$@"
