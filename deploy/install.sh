#!/usr/bin/env bash
# Installs a Zorilla node on a Debian/Ubuntu host: the zorilla-node daemon
# (and the `zorilla` command when it has been built), the systemd unit, and
# an example config that never replaces an existing one. Running it again
# upgrades the binaries and the unit and changes nothing else.
#
# Usage: deploy/install.sh [options]        (as root, from the repository)
#   --no-build         do not run cargo; take the binaries from --binary
#   --binary PATH      the zorilla-node binary to install (default: the
#                      release build in the cargo target directory)
#   --cli PATH         the zorilla CLI (default: `zorilla` next to --binary,
#                      installed only if it exists)
#   --prefix DIR       where binaries go under DIR/bin (default /usr/local)
#   --dest DIR         install into DIR as root directory (DESTDIR-style:
#                      for packaging and tests; needs no root, creates no
#                      user and does not talk to systemd)
#
# Afterwards: edit /etc/zorilla/zorilla.toml (network, listen, peers), then
#   systemctl enable --now zorilla-node
set -euo pipefail

usage() {
  sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"
}

die() {
  echo "install.sh: $*" >&2
  exit 1
}

build=1
binary=
cli=
prefix=/usr/local
dest=
while [ $# -gt 0 ]; do
  case "$1" in
    --no-build) build=0 ;;
    --binary) binary=${2:?--binary needs a path}; shift ;;
    --cli) cli=${2:?--cli needs a path}; shift ;;
    --prefix) prefix=${2:?--prefix needs a directory}; shift ;;
    --dest) dest=${2:?--dest needs a directory}; shift ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; die "unknown option: $1" ;;
  esac
  shift
done

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
case "$prefix" in
  /*) ;;
  *) die "--prefix must be an absolute path: $prefix" ;;
esac
if [ -n "$dest" ]; then
  mkdir -p "$dest"
  dest=$(cd "$dest" && pwd)
elif [ "$(id -u)" -ne 0 ]; then
  die "run as root (sudo $0 ...), or give --dest DIR to install into a directory"
fi

if [ "$build" -eq 1 ]; then
  command -v cargo >/dev/null 2>&1 || die "cargo not found: install Rust (https://rustup.rs) or use --no-build --binary PATH"
  echo "building zorilla-node (release)"
  (cd "$repo" && cargo build --release --locked -p zorilla-node)
  if [ -z "$binary" ]; then
    target=${CARGO_TARGET_DIR:-$repo/target}
    binary=$target/release/zorilla-node
  fi
elif [ -z "$binary" ]; then
  die "--no-build needs --binary PATH (the zorilla-node binary to install)"
fi
if [ ! -f "$binary" ] || [ ! -x "$binary" ]; then
  die "no zorilla-node binary at $binary"
fi
# The `zorilla` CLI is built from the same package; older trees have none.
if [ -z "$cli" ]; then
  cli=$(dirname "$binary")/zorilla
  [ -x "$cli" ] || cli=
elif [ ! -x "$cli" ]; then
  die "no zorilla CLI binary at $cli"
fi

bindir=$dest$prefix/bin
unitdir=$dest/etc/systemd/system
confdir=$dest/etc/zorilla
docdir=$dest$prefix/share/doc/zorilla

# A real install runs the node as the system user `zorilla` (see the unit);
# its home is the state directory, which systemd creates.
if [ -z "$dest" ] && ! getent passwd zorilla >/dev/null; then
  echo "creating system user zorilla"
  useradd --system --user-group --home-dir /var/lib/zorilla --no-create-home \
    --shell /usr/sbin/nologin --comment "Zorilla grid node" zorilla
fi

# `install` replaces a file by a new one rather than writing into it, so a
# running node keeps its old binary until it restarts.
install -d -m 0755 "$bindir" "$unitdir" "$docdir"
install -m 0755 "$binary" "$bindir/zorilla-node"
echo "installed $bindir/zorilla-node"
if [ -n "$cli" ]; then
  install -m 0755 "$cli" "$bindir/zorilla"
  echo "installed $bindir/zorilla"
else
  echo "no zorilla CLI next to $binary: not installed (zorilla-node alone runs a node)"
fi

# The unit names the binary by its path: follow --prefix.
sed "s|^ExecStart=/usr/local/bin/zorilla-node |ExecStart=$prefix/bin/zorilla-node |" \
  "$repo/deploy/zorilla-node.service" >"$unitdir/zorilla-node.service.tmp"
chmod 0644 "$unitdir/zorilla-node.service.tmp"
grep -q "^ExecStart=$prefix/bin/zorilla-node " "$unitdir/zorilla-node.service.tmp" ||
  die "deploy/zorilla-node.service no longer starts /usr/local/bin/zorilla-node: update install.sh"
mv -f "$unitdir/zorilla-node.service.tmp" "$unitdir/zorilla-node.service"
echo "installed $unitdir/zorilla-node.service"

# The example stays available as documentation; the live config is the
# operator's and is never replaced. It may hold the token: root and group
# zorilla only.
install -m 0644 "$repo/deploy/zorilla.toml" "$docdir/zorilla.toml"
install -d -m 0755 "$confdir"
if [ -e "$confdir/zorilla.toml" ]; then
  echo "kept $confdir/zorilla.toml (the example is $docdir/zorilla.toml)"
else
  install -m 0640 "$repo/deploy/zorilla.toml" "$confdir/zorilla.toml"
  if [ -z "$dest" ]; then
    chgrp zorilla "$confdir/zorilla.toml"
  fi
  echo "installed $confdir/zorilla.toml"
fi

if [ -z "$dest" ] && [ -d /run/systemd/system ]; then
  systemctl daemon-reload
  if systemctl is-active --quiet zorilla-node; then
    echo "zorilla-node is running: 'systemctl restart zorilla-node' to run the new binary"
  else
    echo "next: edit /etc/zorilla/zorilla.toml, then 'systemctl enable --now zorilla-node'"
  fi
fi
