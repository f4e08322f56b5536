#!/usr/bin/env python3
"""Checks that every figure in BENCHMARKS.md comes from a command that
scripts/bench.sh runs.

Each `##` section of BENCHMARKS.md (but the generated summary) must name
the commands of its figures, on lines `Command: `...`` (or in a ```sh
block), or say it is a historical record (a line starting
`_Historical record`): figures measured once, whose command is not kept
runnable. A `###` section inherits its parent's commands; a historical
section's commands are not checked.

Each command named outside historical sections must run in bench.sh:
- `cargo bench ... --bench NAME`: a line `run_bench PACKAGE NAME`;
- `zorilla-sim sim/scenarios/NAME.toml ...`: NAME in `scenarios=(...)` (or `scenarios+=(...)`, a run's option);
- `zorilla-sim ARGS` (generated topologies): a line `run_sim LOG ARGS`
  (the arguments as named, `--out DIR` left out);
- `[VAR=N ...] cargo test ARGS`: a line `run_test LOG ARGS` (`--release`
  and `--locked` left out), each VAR set in bench.sh;
- `cargo build ...` lines of a ```sh block build, they measure nothing.

Usage: python3 scripts/check-bench-commands.py (from the repository root).
"""

import re
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = (ROOT / "scripts" / "bench.sh").read_text()
DOC = (ROOT / "BENCHMARKS.md").read_text()

# bench.sh's runs, continuation lines joined.
BENCH_LINES = [
    " ".join(line.split()) for line in BENCH.replace("\\\n", " ").splitlines()
]


def words(command):
    try:
        return shlex.split(command, comments=True)
    except ValueError:
        return command.split()


def drop(ws, flags_with_value=(), flags=()):
    out, skip = [], False
    for w in ws:
        if skip:
            skip = False
        elif w in flags_with_value:
            skip = True
        elif w not in flags:
            out.append(w)
    return out


def runs_in_bench(command):
    """None if bench.sh runs `command`, else why not."""
    ws = words(command)
    env = []
    while ws and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", ws[0]):
        env.append(ws.pop(0).split("=")[0])
    if ws and ws[0] == "/usr/bin/time":
        ws = drop(ws[1:], flags_with_value=("-f",))
    if not ws:
        return "empty command"
    prog = ws[0].rsplit("/", 1)[-1]
    if ws[:2] == ["cargo", "build"]:
        return None
    if ws[:1] == ["scripts/bench.sh"]:
        return None
    if ws[:2] == ["cargo", "bench"]:
        if "--bench" not in ws:
            return "names no --bench"
        name = ws[ws.index("--bench") + 1]
        if any(re.fullmatch(rf"run_bench \S+ {re.escape(name)}", l) for l in BENCH_LINES):
            return None
        return f"no `run_bench PACKAGE {name}` line"
    if prog == "zorilla-sim":
        args = drop(ws[1:], flags_with_value=("--out",))
        if args and args[0].startswith("sim/scenarios/"):
            name = Path(args[0]).stem
            if re.search(rf"scenarios\+?=\([^)]*\b{re.escape(name)}\b", BENCH):
                return None
            return f"scenario {name} is not in bench.sh's scenarios=(...)"
        want = " ".join(args)
        if any(re.fullmatch(rf"run_sim \S+ {re.escape(want)}", l) for l in BENCH_LINES):
            return None
        return f"no `run_sim LOG {want}` line"
    if ws[:2] == ["cargo", "test"]:
        args = " ".join(drop(ws[2:], flags=("--release", "--locked")))
        missing = [v for v in env if f"{v}=" not in BENCH]
        if missing:
            return f"bench.sh sets no {', '.join(missing)}"
        if any(l.endswith(f" {args}") and re.search(r"\brun_test \S+ ", l) for l in BENCH_LINES):
            return None
        return f"no `run_test LOG {args}` line"
    return "not a command bench.sh runs (cargo bench, cargo test, zorilla-sim)"


def sections(text):
    """(level, title, lines) for every heading, the summary block left out."""
    out, current = [], None
    in_summary = False
    for line in text.splitlines():
        if "<!-- bench-summary:begin -->" in line:
            in_summary = True
        if "<!-- bench-summary:end -->" in line:
            in_summary = False
            continue
        if in_summary:
            continue
        m = re.match(r"(#{2,3}) (.*)", line)
        if m:
            current = (len(m.group(1)), m.group(2), [])
            out.append(current)
        elif current:
            current[2].append(line)
    return out


def commands(lines):
    found, in_sh, prose = [], False, []
    for line in lines:
        if line.startswith("```sh"):
            in_sh = True
            continue
        if line.startswith("```"):
            in_sh = False
            continue
        if in_sh:
            ws = words(line)
            if ws and (ws[0].rsplit("/", 1)[-1] == "zorilla-sim" or ws[:1] == ["cargo"] or ws[0] == "/usr/bin/time"):
                found.append(line.strip())
        else:
            prose.append(line)
    # A command may wrap over lines.
    found += [" ".join(c.split()) for c in re.findall(r"(?m)^Command: `([^`]+)`", "\n".join(prose))]
    return found


def main():
    errors = []
    parent = None
    parent_ok = False
    secs = sections(DOC)
    for i, (level, title, lines) in enumerate(secs):
        if title == "Summary":
            continue
        historical = any(l.startswith("_Historical record") for l in lines)
        if level == 2:
            parent, parent_historical = title, historical
            # Commands anywhere in the section or its subsections.
            sub = lines[:]
            for lvl, _, more in secs[i + 1:]:
                if lvl == 2:
                    break
                sub += more
            subs_historical = [
                any(l.startswith("_Historical record") for l in more)
                for lvl, _, more in secs[i + 1:]
                if lvl == 3
            ]
            parent_ok = historical or bool(commands(sub)) or (subs_historical and all(subs_historical))
            if not parent_ok:
                errors.append(f"section `{title}` names no `Command:` and is not marked `_Historical record`")
        elif parent_historical:
            continue
        if historical:
            continue
        for command in commands(lines):
            why = runs_in_bench(command)
            if why:
                errors.append(f"section `{title}`: `{command}` does not run in scripts/bench.sh: {why}")
    for e in errors:
        print(f"BENCHMARKS.md: {e}", file=sys.stderr)
    if errors:
        print(
            "Every figure must name its command, and that command must run in scripts/bench.sh "
            "(or its section be marked `_Historical record`).",
            file=sys.stderr,
        )
        sys.exit(1)
    print("every command BENCHMARKS.md names runs in scripts/bench.sh")


if __name__ == "__main__":
    main()
