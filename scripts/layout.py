"""The repository's layout, as the check scripts read it: its root, the
top-level directories that hold code, and each crate's directory by the name
Rust code uses for it (scripts/check-security-doc.py,
scripts/check-architecture.py)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CODE_DIRS = ("core", "overlay", "sandbox", "node", "webui", "sim", "sdk", "examples", "deploy", "scripts", "docs")
CRATES = {
    "zorilla_core": "core",
    "zorilla_overlay": "overlay",
    "zorilla_sandbox": "sandbox",
    "zorilla_node": "node",
    "zorilla_webui": "webui",
    "zorilla_sim": "sim",
}
