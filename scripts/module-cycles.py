#!/usr/bin/env python3
"""Finds module dependency cycles inside the crates of the workspace.

    scripts/module-cycles.py [CRATE_DIR...]     (default: every crate with a src/)

A module depends on another when its code (not its comments, not its
`#[cfg(test)]` modules) names an item of the other through a `crate::`,
`super::` or `self::` path, in a `use` or inline. Paths through a re-export
(`pub use worker::Outcome` in lib.rs) count as a dependency on the module
that defines the item, not on the one that re-exports it; the re-export
itself is a dependency of the re-exporting module. A module is a file
(`src/a.rs`, `src/a/mod.rs`, `src/a/b.rs`); inline modules other than tests
count as part of their file. Prints each strongly connected component of
more than one module, with the lines that make its edges, and exits 1 if
there is one.
"""

import os
import re
import sys

from graphs import sccs

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def strip_comments_and_tests(text):
    """The code of a file without comments, string contents and test modules."""
    out = []
    i, n = 0, len(text)
    while i < n:
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
        elif text[i] == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""')
            i = j + 1
        elif text.startswith("r#\"", i) or text.startswith('r"', i):
            hashes = 1 if text[i + 1] == "#" else 0
            end = '"' + "#" * hashes
            j = text.find(end, i + 2 + hashes)
            out.append('""')
            i = n if j < 0 else j + len(end)
        elif text[i] == "'" and re.match(r"'(\\.|[^\\'])'", text[i:i + 4]):
            m = re.match(r"'(\\.|[^\\'])'", text[i:])
            out.append("' '")
            i += m.end()
        else:
            out.append(text[i])
            i += 1
    code = "".join(out)
    # Drop `#[cfg(test)] mod name { ... }` blocks (brace matching).
    while True:
        m = re.search(r"#\[cfg\(test\)\]\s*(pub(\([^)]*\))?\s+)?mod\s+" + IDENT + r"\s*\{", code)
        if not m:
            break
        depth, j = 0, m.end() - 1
        while j < len(code):
            if code[j] == "{":
                depth += 1
            elif code[j] == "}":
                depth -= 1
                if depth == 0:
                    break
            j += 1
        code = code[: m.start()] + code[j + 1:]
    return code


def expand_use(tree):
    """`a::{b, c::{d, e as f}}` -> [a::b, a::c::d, a::c::e] (renames dropped)."""
    tree = re.sub(r"\s+", "", tree)
    m = re.match(r"^(.*?)\{(.*)\}$", tree)
    if not m:
        return [re.sub(r"as" + IDENT + "$", "", tree) if "as" in tree else tree]
    prefix, inner = m.group(1), m.group(2)
    parts, depth, cur = [], 0, ""
    for ch in inner:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += ch == "{"
        depth -= ch == "}"
        cur += ch
    parts.append(cur)
    out = []
    for p in parts:
        if p:
            out.extend(expand_use(prefix + p))
    return out


def load_crate(src):
    """{module path tuple: code} for every file module under src."""
    mods = {}
    for root, _, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs"):
                continue
            path = os.path.join(root, f)
            rel = os.path.relpath(path, src)[:-3].split(os.sep)
            if rel[-1] in ("lib", "main", "mod"):
                rel = rel[:-1]
            if rel and rel[0] == "bin":
                continue
            with open(path, encoding="utf-8") as fh:
                mods[tuple(rel)] = (path, strip_comments_and_tests(fh.read()))
    return mods


def analyse(src):
    mods = load_crate(src)
    uses = {}  # module -> list of (full path segments, line)
    imports = {}  # module -> {name: absolute path segments}
    for mod, (path, code) in mods.items():
        found = []
        for m in re.finditer(r"\buse\s+([^;]*);", code):
            line = code.count("\n", 0, m.start()) + 1
            for p in expand_use(m.group(1)):
                segs = p.split("::")
                found.append((segs, line, True))
        for m in re.finditer(r"(?<![A-Za-z0-9_:])((?:crate|super|self)(?:::" + IDENT + ")+)", code):
            line = code.count("\n", 0, m.start()) + 1
            found.append((m.group(1).split("::"), line, False))
        uses[mod] = found

    def absolute(mod, segs):
        segs = list(segs)
        if not segs:
            return None
        if segs[0] == "crate":
            base, segs = [], segs[1:]
        elif segs[0] in ("super", "self"):
            base = list(mod)
            while segs and segs[0] in ("super", "self"):
                if segs[0] == "super":
                    if not base:
                        return None
                    base.pop()
                segs = segs[1:]
        else:
            first = segs[0]
            if (tuple(mod) + (first,)) in mods:
                base = list(mod)
            else:
                return None  # an external crate or std
        return base + segs

    for mod, found in uses.items():
        table = {}
        for segs, _, is_use in found:
            if not is_use:
                continue
            a = absolute(mod, segs)
            if a and a[-1] not in ("*", "self"):
                table[a[-1]] = a
            elif a and a[-1] == "self" and len(a) > 1:
                table[a[-2]] = a[:-1]
        imports[mod] = table

    def resolve(segs, depth=0):
        """The module that defines the item at absolute path segs."""
        cur = ()
        i = 0
        while i < len(segs) and (cur + (segs[i],)) in mods:
            cur = cur + (segs[i],)
            i += 1
        if i < len(segs) and depth < 8:
            target = imports.get(cur, {}).get(segs[i])
            if target and target != list(cur) + [segs[i]]:
                return resolve(target + segs[i + 1:], depth + 1)
        return cur

    edges = {}  # (a, b) -> [lines]
    for mod, found in uses.items():
        for segs, line, is_use in found:
            a = absolute(mod, segs)
            if a is None:
                continue
            if a[-1] in ("*", "self"):
                a = a[:-1]
            target = resolve(a)
            # A module's own descendants and itself are not a dependency
            # when reached by a path through the module itself only.
            if target == mod:
                continue
            edges.setdefault((mod, target), []).append(f"{mods[mod][0]}:{line}")
    return mods, edges


def name(mod):
    return "crate::" + "::".join(mod) if mod else "crate"


def main():
    dirs = sys.argv[1:]
    if not dirs:
        top = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
        dirs = sorted(
            os.path.join(top, d) for d in os.listdir(top) if os.path.isdir(os.path.join(top, d, "src"))
        )
    bad = False
    for d in dirs:
        mods, edges = analyse(os.path.join(d, "src"))
        cycles = [c for c in sccs(mods.keys(), edges.keys()) if len(c) > 1]
        print(f"{os.path.basename(os.path.normpath(d))}: {len(mods)} modules, {len(edges)} edges, "
              f"{len(cycles)} cycles")
        for comp in cycles:
            bad = True
            members = set(comp)
            print("  cycle: " + ", ".join(sorted(name(m) for m in comp)))
            for (a, b), lines in sorted(edges.items()):
                if a in members and b in members:
                    print(f"    {name(a)} -> {name(b)}: {', '.join(lines[:3])}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
