#!/usr/bin/env bash
# Installs a Zorilla node on a Debian/Ubuntu host: the zorilla-node daemon
# (and the `zorilla` command when it has been built), the systemd unit, and
# an example config that never replaces an existing one. Running it again
# upgrades the binaries and the unit (and the native drop-in, if installed)
# and changes nothing else.
#
# Usage: deploy/install.sh [options]        (as root, from the repository)
#   --no-build         do not run cargo; take the binaries from --binary
#   --binary PATH      the zorilla-node binary to install (default: the
#                      release build in the cargo target directory)
#   --cli PATH         the zorilla CLI (default: `zorilla` next to --binary,
#                      installed only if it exists)
#   --prefix DIR       where binaries go under DIR/bin (default /usr/local)
#   --native           let the node run native jobs too: install the unit's
#                      drop-in zorilla-node.service.d/native.conf (namespaces,
#                      capabilities and cgroup delegation for the kernel's
#                      sandbox, see deploy/zorilla-node-native.conf), and
#                      reserve the ids of native workers, 1000000-1065535,
#                      for user zorilla in /etc/subuid and /etc/subgid;
#                      refused if a user, a group or another subordinate
#                      range already has one of them; and build the PMI-1
#                      library through which Open MPI programs wire up,
#                      DIR/lib/zorilla/libzorilla-pmi.so under --prefix
#                      (with cc, if the machine has it)
#   --dest DIR         install into DIR as root directory (DESTDIR-style:
#                      for packaging and tests; needs no root, creates no
#                      user and does not talk to systemd; --native checks
#                      and writes DIR/etc's passwd, group, subuid, subgid)
#
# Afterwards: edit /etc/zorilla/zorilla.toml (network, listen, peers, and
# native_users with --native), then
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
native=0
while [ $# -gt 0 ]; do
  case "$1" in
    --no-build) build=0 ;;
    --binary) binary=${2:?--binary needs a path}; shift ;;
    --cli) cli=${2:?--cli needs a path}; shift ;;
    --prefix) prefix=${2:?--prefix needs a directory}; shift ;;
    --dest) dest=${2:?--dest needs a directory}; shift ;;
    --native) native=1 ;;
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

# The user and group ids the node gives native workers, one per running
# worker: NativeConfig::ids in sandbox/src/native/mod.rs (the node has no
# setting for them; node/tests/deploy.rs checks that the two agree).
native_first=1000000
native_count=65536
native_last=$((native_first + native_count - 1))

# Entries (name:id) of the passwd or group database: the machine's through
# NSS for a real install (local files, and LDAP or SSSD where they list
# their users), the file under --dest otherwise.
id_entries() {
  if [ -n "$dest" ]; then
    [ -f "$dest/etc/$1" ] && cut -d: -f1,3 "$dest/etc/$1"
  else
    getent "$1" | cut -d: -f1,3
  fi
  return 0
}

# Refuses (before anything is installed) when the workers' ids are taken:
# a worker must never act as a user or group of the machine, and a range
# another user holds in /etc/subuid or /etc/subgid (a rootless container's)
# would be shared with that user's containers.
check_native_ids() {
  local db entry name id file owner start count
  for db in passwd group; do
    while IFS=: read -r name id; do
      case "$id" in ''|*[!0-9]*) continue ;; esac
      if [ "$id" -ge "$native_first" ] && [ "$id" -le "$native_last" ]; then
        local what=user
        [ "$db" = group ] && what=group
        die "$what $name has id $id, in the range native workers get ($native_first-$native_last): they would act as $name; give it another id, or leave out --native"
      fi
    done < <(id_entries "$db")
  done
  for file in subuid subgid; do
    [ -f "$dest/etc/$file" ] || continue
    while IFS=: read -r owner start count; do
      case "$start$count" in ''|*[!0-9]*) continue ;; esac
      [ "$owner" = zorilla ] && [ "$start" -eq "$native_first" ] && [ "$count" -eq "$native_count" ] && continue
      if [ "$start" -le "$native_last" ] && [ $((start + count - 1)) -ge "$native_first" ]; then
        die "$dest/etc/$file gives $owner ids $start-$((start + count - 1)), which overlap those of native workers ($native_first-$native_last): move that range, or leave out --native"
      fi
    done <"$dest/etc/$file"
  done
}

# Records the range as user zorilla's subordinate ids, so that useradd
# never hands it to a new user's containers (it allocates around the
# ranges listed there).
reserve_native_ids() {
  local file
  for file in subuid subgid; do
    if grep -qx "zorilla:$native_first:$native_count" "$dest/etc/$file" 2>/dev/null; then
      echo "kept zorilla:$native_first:$native_count in $dest/etc/$file"
    else
      [ -e "$dest/etc/$file" ] || install -m 0644 /dev/null "$dest/etc/$file"
      echo "zorilla:$native_first:$native_count" >>"$dest/etc/$file"
      echo "reserved ids $native_first-$native_last for native workers in $dest/etc/$file"
    fi
  done
}

if [ "$native" -eq 1 ]; then
  check_native_ids
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

# Native jobs: the drop-in that relaxes the unit for the kernel's sandbox.
# Once installed it is upgraded with the unit (what the sandbox needs may
# change with the binary); removing it (and daemon-reload) turns native
# jobs off again.
dropin=$unitdir/zorilla-node.service.d/native.conf
if [ "$native" -eq 1 ] || [ -e "$dropin" ]; then
  was=$([ -e "$dropin" ] && echo updated || echo installed)
  install -d -m 0755 "$unitdir/zorilla-node.service.d"
  install -m 0644 "$repo/deploy/zorilla-node-native.conf" "$dropin"
  echo "$was $dropin (native jobs; remove it to turn them off)"
  # Open MPI programs load it to reach the node's PMI server (see
  # sdk/native/zorilla_pmi.c); MPICH's need its fix of MPI_Finalize
  # (sdk/native/zorilla_ucx.c) for jobs of 3 ranks or more. Upgraded with
  # the rest.
  libdir=$dest$prefix/lib/zorilla
  if command -v cc >/dev/null 2>&1; then
    install -d -m 0755 "$libdir"
    cc -O2 -shared -fPIC "$repo/sdk/native/zorilla_pmi.c" "$repo/sdk/native/zorilla_ucx.c" \
      -o "$libdir/libzorilla-pmi.so.tmp" -ldl
    chmod 0644 "$libdir/libzorilla-pmi.so.tmp"
    mv -f "$libdir/libzorilla-pmi.so.tmp" "$libdir/libzorilla-pmi.so"
    echo "installed $libdir/libzorilla-pmi.so (MPI programs run natively through it)"
    [ "$prefix" = /usr/local ] ||
      echo "  set native_pmi_library = \"$prefix/lib/zorilla/libzorilla-pmi.so\" in the config"
  else
    echo "no C compiler (cc): Open MPI programs, and MPICH ones of 3 ranks or more, will not run natively here (install gcc and run again)"
  fi
fi
if [ "$native" -eq 1 ]; then
  # (Under --dest only: `install -d -m` would set the mode of a real /etc.)
  [ -z "$dest" ] || install -d -m 0755 "$dest/etc"
  reserve_native_ids
fi

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

if [ "$native" -eq 1 ]; then
  if grep -q '^native_users *=' "$confdir/zorilla.toml"; then
    echo "native jobs: $confdir/zorilla.toml lists native_users; the node says at start whether it runs them (journalctl -u zorilla-node)"
  else
    echo "native jobs: list the users whose native jobs run here in $confdir/zorilla.toml,"
    echo "  native_users = [\"<user id, as \`zorilla whoami\` prints it>\"]"
    echo "and restart the node; its log then says \"native jobs of N users run here\", or which sandbox mechanism is missing"
  fi
  if [ -z "$dest" ] && [ ! -e /sys/fs/cgroup/cgroup.controllers ]; then
    echo "warning: this machine does not use cgroup v2 alone (/sys/fs/cgroup is not a cgroup2 mount): systemd delegates no group the node can use, and it will decline native jobs" >&2
  fi
fi

if [ -z "$dest" ] && [ -d /run/systemd/system ]; then
  systemctl daemon-reload
  if systemctl is-active --quiet zorilla-node; then
    echo "zorilla-node is running: 'systemctl restart zorilla-node' to run the new binary"
  else
    echo "next: edit /etc/zorilla/zorilla.toml, then 'systemctl enable --now zorilla-node'"
  fi
fi
