#!/usr/bin/env bash
# Installs the Debian packages the test suite needs, if any are missing:
# clang and wasi-libc (to check that the committed guest modules rebuild
# identically), chromium and chromedriver (the status page's browser test),
# iproute2 and util-linux (tests that create their own network namespace),
# nftables (node/tests/nat.rs and the realnet benchmark masquerade in NAT
# routers of their own namespaces),
# systemd (systemd-analyze checks deploy/zorilla-node.service), gcc (the
# compute benchmark builds the native baseline of nqueens.c), mount (the
# full-disk test mounts a small tmpfs in a mount namespace of its own),
# llvm (llvm-ar: GNU ar writes no symbol index for wasm objects, which
# sdk/build.sh needs; llvm-nm, which reads what each of the MPI library's
# objects defines and uses for scripts/c-cycles.py), openmpi-bin and
# libopenmpi-dev (node/tests/mpi.rs runs the MPI test programs under
# OpenMPI too, and the MPI benchmark measures it beside Zorilla, as does
# the ping-pong benchmark), mpich and libmpich-dev (node/tests/native.rs
# builds an MPI program with mpicc.mpich and runs it as a native job, its
# ranks wired up by the node's PMI-1 server; Open MPI stays the default
# mpicc), gfortran (the same test builds a Fortran MPI program with each
# MPI's mpif90), python3
# (scripts/module-cycles.py checks that no module depends back on one
# that depends on it, scripts/c-cycles.py the same of the MPI library's
# C files), python3-venv, python3-setuptools and python3-wheel (the Python
# client, sdk/python, is installed with pip into a virtual environment and
# built there without downloading anything), python3-cbor2 and
# python3-cryptography (its dependencies: CBOR and ed25519).
set -euo pipefail

packages=(
  clang lld wasi-libc libclang-rt-14-dev-wasm32
  chromium chromium-driver
  iproute2 util-linux nftables
  systemd
  gcc gfortran mount
  llvm openmpi-bin libopenmpi-dev mpich libmpich-dev
  python3 python3-venv python3-setuptools python3-wheel python3-cbor2 python3-cryptography
)
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
[ "${#missing[@]}" -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO=sudo
  else
    echo "missing packages: ${missing[*]}; install them as root (apt-get install ${missing[*]})" >&2
    exit 1
  fi
else
  SUDO=
fi
echo "installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
