#!/usr/bin/env python3
"""Checks that what docs/security.md names as evidence exists.

docs/security.md says, for each thing a hostile party might try, which
code stops it and which test shows it. A name there that no longer exists
(a test renamed, a file made a directory) is a claim nobody checks; this
script fails on each, in backquotes:
- a repository path (`node/src/link/`, `core/tests/replica.rs`): it
  exists; with `::name` after a file, that file defines `fn name` or
  `mod name`;
- a crate path (`zorilla_core::flood::DISTANCE_KEPT`): the modules exist
  (as `src/flood.rs` or `src/flood/`) and the last one names the item;
- a test-like name (snake_case, three underscores or more): some `.rs`
  file of the repository defines `fn name`;
- any other snake_case name (`stored_logs`): some `.rs` file has it.

Usage: python3 scripts/check-security-doc.py [FILE...] (from anywhere;
docs/security.md by default).
"""

import re
import sys
from pathlib import Path

from layout import CODE_DIRS, CRATES, ROOT
TOP = CODE_DIRS


def rust_files():
    for top in TOP:
        yield from (ROOT / top).rglob("*.rs")


SOURCES = {path: path.read_text(errors="replace") for path in rust_files()}
WORDS = set()
FNS = set()
for text in SOURCES.values():
    WORDS.update(re.findall(r"\b[A-Za-z_][A-Za-z0-9_]*\b", text))
    FNS.update(re.findall(r"\bfn\s+([a-z_][a-z0-9_]*)", text))


def defines(paths, name):
    pattern = re.compile(rf"\b(fn|mod)\s+{re.escape(name)}\b")
    return any(pattern.search(SOURCES.get(p) or p.read_text(errors="replace")) for p in paths)


def files_of(path):
    return [path] if path.is_file() else sorted(path.rglob("*.rs"))


def check_path(token):
    path, _, item = token.partition("::")
    full = ROOT / path.rstrip("/")
    if not full.exists():
        return f"`{path}` does not exist"
    if item and not defines(files_of(full), item):
        return f"`{path}` defines no `fn {item}` or `mod {item}`"
    return None


def check_crate_path(token):
    crate, *segments = token.split("::")
    module = ROOT / CRATES[crate] / "src"
    files = [module / "lib.rs"]
    for i, segment in enumerate(segments):
        as_file, as_dir = module / f"{segment}.rs", module / segment
        if as_file.is_file() or as_dir.is_dir():
            module = as_dir
            files = [as_file] if as_file.is_file() else [as_dir / "mod.rs"]
            continue
        if i != len(segments) - 1:
            return f"`{token}`: no module `{segment}`"
        if not any(re.search(rf"\b{re.escape(segment)}\b", f.read_text(errors="replace")) for f in files if f.is_file()):
            return f"`{token}`: `{segment}` is not in {', '.join(str(f.relative_to(ROOT)) for f in files)}"
    return None


def check(token):
    if re.match(rf"^({'|'.join(TOP)})/", token) and " " not in token:
        return check_path(token)
    if token.split("::")[0] in CRATES:
        return check_crate_path(token)
    if re.fullmatch(r"[a-z][a-z0-9]*(_[a-z0-9]+)+", token):
        if token.count("_") >= 3:
            return None if token in FNS else f"no test or function `{token}` in the repository"
        return None if token in WORDS else f"`{token}` appears in no source file"
    return None


def main():
    docs = [Path(a).resolve() for a in sys.argv[1:]] or [ROOT / "docs" / "security.md"]
    errors = []
    for doc in docs:
        for number, line in enumerate(doc.read_text().splitlines(), 1):
            for token in re.findall(r"`([^`]+)`", line):
                why = check(token.strip())
                if why:
                    errors.append(f"{doc.relative_to(ROOT)}:{number}: {why}")
    for e in errors:
        print(e, file=sys.stderr)
    if errors:
        print("docs name code or tests that are not there: fix the names", file=sys.stderr)
        sys.exit(1)
    print(f"every file, test and item {', '.join(str(d.relative_to(ROOT)) for d in docs)} names exists")


if __name__ == "__main__":
    main()
