#!/usr/bin/env python3
"""Finds dependency cycles between the C files of the MPI library (sdk/src).

    scripts/c-cycles.py [ARCHIVE]     (default: build sdk/lib/libzmpi.a first)

A file depends on another when its object calls a function or uses a
variable the other's object defines: the archive's members are read with
llvm-nm (`U name` in one member, defined in another), so what counts is
what the compiler kept, not what the sources mention (a call inlined from
zmpi.h is no dependency; a call through a macro is). Without an argument
the library is built from the sources as they are, with sdk/build.sh.

The files must form layers: each uses only those below it (env.c's state
and errors at the bottom, MPI_Init and MPI_Finalize at the top). Prints the
layers, or each strongly connected component of more than one file with
the symbols that make its edges, and exits 1 if there is one.

llvm-nm is $NM, else `llvm-nm`, else the newest `llvm-nm-NN` on the PATH
(Debian's llvm-14 package installs llvm-nm-14; its `llvm` package adds the
plain name).
"""

import os
import re
import shutil
import subprocess
import sys

from graphs import sccs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def find_nm():
    if os.environ.get("NM"):
        return os.environ["NM"]
    if shutil.which("llvm-nm"):
        return "llvm-nm"
    versions = []
    for d in os.environ.get("PATH", "").split(os.pathsep):
        try:
            names = os.listdir(d)
        except OSError:
            continue
        for n in names:
            m = re.fullmatch(r"llvm-nm-(\d+)", n)
            if m and os.access(os.path.join(d, n), os.X_OK):
                versions.append((int(m.group(1)), n))
    if not versions:
        sys.exit("c-cycles: no llvm-nm on the PATH (apt-get install llvm, or set NM)")
    return max(versions)[1]


def members(archive):
    """{member: (defined symbols, undefined symbols)} of the archive."""
    out = subprocess.run([find_nm(), archive], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"c-cycles: llvm-nm {archive} failed: {out.stderr.strip()}")
    found, cur = {}, None
    for line in out.stdout.splitlines():
        if line.endswith(":") and not line.startswith(" "):
            cur = line[:-1]
            found[cur] = (set(), set())
            continue
        parts = line.split()
        if cur is None or len(parts) < 2:
            continue
        kind, name = parts[-2], parts[-1]
        if kind == "U":
            found[cur][1].add(name)
        elif kind.isupper():  # defined and global (lower case: local to the file)
            found[cur][0].add(name)
    return found


def graph(found):
    """{(a, b): sorted symbols a uses from b} between distinct members."""
    owner = {}
    for m, (defined, _) in sorted(found.items()):
        for s in defined:
            owner.setdefault(s, m)
    edges = {}
    for m, (_, undefined) in found.items():
        for s in undefined:
            o = owner.get(s)
            if o is not None and o != m:
                edges.setdefault((m, o), []).append(s)
    return {e: sorted(s) for e, s in edges.items()}


def layers(nodes, edges):
    """Each file's height: 0 for one that uses no other, else one more than
    the highest it uses (the graph must be acyclic)."""
    height = {}

    def h(n):
        if n not in height:
            height[n] = 1 + max((h(b) for a, b in edges if a == n), default=-1)
        return height[n]

    for n in nodes:
        h(n)
    return [sorted(n for n in nodes if height[n] == k) for k in range(max(height.values()) + 1)]


def source(member):
    return member[:-2] + ".c" if member.endswith(".o") else member


def main():
    if len(sys.argv) > 2:
        sys.exit(__doc__)
    if len(sys.argv) == 2:
        archive = sys.argv[1]
    else:
        archive = os.path.join(ROOT, "sdk", "lib", "libzmpi.a")
        subprocess.run([os.path.join(ROOT, "sdk", "build.sh")], check=True, stdout=subprocess.DEVNULL)
    found = members(archive)
    if not found:
        sys.exit(f"c-cycles: {archive} has no members")
    edges = graph(found)
    cycles = [sorted(c) for c in sccs(sorted(found), sorted(edges)) if len(c) > 1]
    print(f"{os.path.basename(archive)}: {len(found)} files, {len(edges)} edges, {len(cycles)} cycles")
    for comp in cycles:
        members_ = set(comp)
        print("  cycle: " + ", ".join(source(m) for m in comp))
        for (a, b), syms in sorted(edges.items()):
            if a in members_ and b in members_:
                shown = " ".join(syms[:6]) + (" ..." if len(syms) > 6 else "")
                print(f"    {source(a)} -> {source(b)}: {shown}")
    if cycles:
        sys.exit(1)
    for k, layer in enumerate(layers(found.keys(), edges.keys())):
        print(f"  layer {k}: " + " ".join(source(m) for m in layer))


if __name__ == "__main__":
    sys.setrecursionlimit(10000)
    main()
