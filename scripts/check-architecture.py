#!/usr/bin/env python3
"""Checks that the map of the code (docs/ARCHITECTURE.md) names only what
exists, and that README.md's diagram does too.

A map whose paths no longer exist sends a newcomer to nothing; this script
fails on each such name. In docs/ARCHITECTURE.md, every name in backquotes
that looks like a repository path is checked, and so is every path-like
word in its fenced blocks (the diagrams):
- a path (`core/src/flood.rs`, `node/src/link/`, `sdk/src/*.c`): it
  exists (a `*` matches at least one file);
- a path with items (`core/src/replica.rs::Replica`,
  `core/src/node/takeover.rs::Scheduler::adopt`): the file exists, every
  item but the last is a type, trait or module the file defines or
  implements, and the last is one it defines (`fn`, `struct`, `enum`,
  `trait`, `mod`, `type`, `const`, `static`, `macro_rules!`) or a variant
  of an enum (a line of the file that starts with it);
- a crate path (`zorilla_core::replica::Replica`): its modules exist and
  the last of them names the item as above;
- an item without its file (`RankTable`, `Scheduler::adopt`,
  `Input::RanksLost`): some Rust file of the code defines it so;
- a snake_case name (`choose_copies`, `on_worker_lost`): some source
  file (Rust, C, TOML, shell) of the code has it.
A word with a `/` whose first part is no top-level entry of the repository
(`src/flood.rs`) fails too: paths are written from the repository's root.
The map must also name every top-level directory of the code, so that a
new one does not go unmapped.

In README.md only the section "How it fits together" (its diagram and the
prose under it) is checked, the same way. And each crate's `src/lib.rs`
must name in its module doc (in backquotes) every module it declares.

Usage: python3 scripts/check-architecture.py [FILE...] (from anywhere;
docs/ARCHITECTURE.md and README.md's diagram by default). Exit status 1,
with one sentence per failure, when a name does not exist.
"""

import re
import sys
from pathlib import Path

from layout import CODE_DIRS, CRATES, ROOT
MAP = ROOT / "docs" / "ARCHITECTURE.md"
README = ROOT / "README.md"
README_SECTION = "How it fits together"
# The directories of the code that the map must name.
MAPPED = CODE_DIRS
EXTENSIONS = (".rs", ".md", ".toml", ".sh", ".py", ".c", ".h", ".wasm", ".service", ".svg", ".png", ".lock")
TOP = {p.name for p in ROOT.iterdir() if not p.name.startswith(".git")}
PATH_WORD = re.compile(r"[A-Za-z0-9_.*-]+(?:/[A-Za-z0-9_.*-]*)+|[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)+")
DEFINES = r"(?:pub(?:\([a-z]+\))?\s+)?(?:async\s+)?(?:fn|struct|enum|trait|mod|type|const|static|union|macro_rules!)"


def looks_like_path(word):
    """Whether `word` is meant as a path of the repository."""
    if " " in word or word.startswith(("/", "~", ".", "-")) or "://" in word:
        return False
    if "/" in word:
        return bool(re.fullmatch(PATH_WORD, word.split("::")[0]))
    return word.split("::")[0].endswith(EXTENSIONS) and word.split("::")[0] in TOP


def defines(text, name, last):
    """Whether a Rust file's `text` defines item `name` (the last of a
    path: also an enum variant), or defines or implements it (a type or
    module the path goes through)."""
    n = re.escape(name)
    if re.search(rf"^\s*{DEFINES}\s+{n}\b", text, re.M):
        return True
    if last:
        return bool(re.search(rf"^\s+{n}\s*(?:[{{(,]|$)", text, re.M))
    return bool(re.search(rf"^\s*(?:unsafe\s+)?impl\b[^{{;]*\b{n}\b", text, re.M))


def check_items(path, items):
    text = path.read_text(errors="replace")
    rel = path.relative_to(ROOT)
    for i, item in enumerate(items):
        last = i == len(items) - 1
        if not defines(text, item, last):
            what = "defines no item" if last else "defines or implements no type or module"
            return f"`{rel}` {what} `{item}`"
    return None


def check_path(word):
    path, *items = word.split("::")
    first = path.split("/")[0]
    if first not in TOP:
        return f"`{word}` is not a path from the repository's root (no top-level `{first}`)"
    if "*" in path:
        if not any(ROOT.glob(path)):
            return f"`{path}` matches no file"
        return None
    full = ROOT / path.rstrip("/")
    if not full.exists():
        return f"`{path}` does not exist"
    if path.endswith("/") and not full.is_dir():
        return f"`{path}` is written as a directory but is a file"
    if items:
        if not full.is_file() or full.suffix != ".rs":
            return f"`{word}` names items of `{path}`, which is not a Rust file"
        return check_items(full, items)
    return None


def check_crate_path(word):
    crate, *segments = word.split("::")
    module = ROOT / CRATES[crate] / "src"
    file = module / "lib.rs"
    for i, segment in enumerate(segments):
        as_file, as_dir = module / f"{segment}.rs", module / segment / "mod.rs"
        if as_file.is_file() or as_dir.is_file():
            file = as_file if as_file.is_file() else as_dir
            module = module / segment
            continue
        return check_items(file, segments[i:])
    return None


def code_files(suffixes):
    for top in MAPPED:
        for path in sorted((ROOT / top).rglob("*")):
            if path.suffix in suffixes and path.is_file() and "target" not in path.parts:
                yield path


RUST = {path: path.read_text(errors="replace") for path in code_files({".rs"})}
WORDS = set()
for path in code_files({".rs", ".c", ".h", ".toml", ".sh"}):
    WORDS.update(re.findall(r"\b[A-Za-z_][A-Za-z0-9_]*\b", path.read_text(errors="replace")))


def check_anywhere(word):
    """A Rust item without its file (`RankTable`, `Scheduler::adopt`,
    `Input::RanksLost`): some file of the code defines it."""
    items = word.split("::")
    for text in RUST.values():
        if all(item in text for item in items) and all(defines(text, item, i == len(items) - 1) for i, item in enumerate(items)):
            return None
    return f"no Rust file of the code defines `{word}`"


def check(word):
    word = word.strip().rstrip(".,;:")
    if word.split("::")[0] in CRATES and "::" in word:
        return check_crate_path(word)
    if looks_like_path(word):
        return check_path(word)
    if re.fullmatch(r"[A-Z][A-Za-z0-9]*(::[A-Za-z_][A-Za-z0-9_]*)*", word):
        return check_anywhere(word)
    if re.fullmatch(r"[a-z][a-z0-9]*(_[a-z0-9]+)+", word) and word not in WORDS:
        return f"`{word}` appears in no source file"
    return None


def words_of(lines):
    """(line number, word) of every backquoted word, and of every
    path-like word in a fenced block."""
    fenced = False
    for number, line in lines:
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            for word in re.findall(r"[^\s()\[\],:;│┌┐└┘├┤─▶◀▲▼]+(?:::[A-Za-z_][A-Za-z0-9_]*)*", line):
                word = word.rstrip(".,")
                if "/" in word and looks_like_path(word):
                    yield number, word
        else:
            for word in re.findall(r"`([^`]+)`", line):
                yield number, word


def section(text, title):
    """The numbered lines of the `##` section `title`."""
    lines, inside = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("## "):
            inside = line[3:].strip() == title
            continue
        if inside:
            lines.append((number, line))
    return lines


def unnamed_modules():
    """A sentence for each module a crate's `src/lib.rs` declares that the
    crate's own doc (its `//!` lines) does not name in backquotes: the
    crate's front page is the first map a reader of its code gets."""
    errors = []
    for crate, top in CRATES.items():
        lib = ROOT / top / "src" / "lib.rs"
        text = lib.read_text()
        doc = "\n".join(l for l in text.splitlines() if l.startswith("//!"))
        for module in re.findall(r"^\s*(?:pub(?:\([a-z]+\))?\s+)?mod\s+([a-z_0-9]+)\s*;", text, re.M):
            if not re.search(rf"`{module}(`|::)", doc):
                errors.append(
                    f"{lib.relative_to(ROOT)} declares `mod {module}` but its module doc does not name it: "
                    "add a line on what it is for."
                )
    return errors


def main():
    docs = [Path(a).resolve() for a in sys.argv[1:]] or [MAP, README]
    errors = [] if sys.argv[1:] else unnamed_modules()
    for doc in docs:
        text = doc.read_text()
        rel = doc.relative_to(ROOT)
        if doc == README:
            lines = section(text, README_SECTION)
            if not lines:
                errors.append(f"{rel} has no section `## {README_SECTION}` (the diagram this script checks)")
        else:
            lines = list(enumerate(text.splitlines(), 1))
        for number, word in words_of(lines):
            why = check(word)
            if why:
                errors.append(f"{rel}:{number}: {why}.")
        if doc == MAP:
            named = {w.strip().split("/")[0] for _, w in words_of(lines)}
            for top in MAPPED:
                if top not in named:
                    errors.append(f"{rel} never names `{top}/`, a directory of the code: put it on the map.")
    for e in errors:
        print(e, file=sys.stderr)
    if errors:
        print(
            "The map of the code is wrong: fix the names above (paths from the repository's root, "
            "modules named in their crate's front page).",
            file=sys.stderr,
        )
        sys.exit(1)
    print(
        f"every path and item {' and '.join(str(d.relative_to(ROOT)) for d in docs)} name exists"
        + ("" if sys.argv[1:] else ", and every crate's front page names its modules")
    )


if __name__ == "__main__":
    main()
