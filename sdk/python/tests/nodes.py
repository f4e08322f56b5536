"""Real `zorilla-node` processes for the tests, and the `zorilla` tool.

A node is started on loopback with every port chosen by the OS (its client
port, overlay and status page), in a state directory of the test's own;
the test waits for its ready line (``zorilla-node ready peer=... client=...``),
read from its stdout by a thread, with a deadline, and stops it at the end
(and the kernel kills it if the test process dies first).

The binaries are taken from ``$ZORILLA_BIN_DIR`` (scripts/test.sh sets it to
the debug build), else from ``target/debug`` of the repository; without
them the tests that need a node are skipped, unless ``ZORILLA_BIN_DIR`` was
set, when they fail.
"""

from __future__ import annotations

import ctypes
import json
import os
import queue
import signal
import subprocess
import threading
import unittest
from pathlib import Path
from typing import Dict, List, Optional

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = REPO / "examples" / "wasm"
READY_PREFIX = "zorilla-node ready"
READY_TIMEOUT = 60.0
STOP_TIMEOUT = 15.0


def bin_dir() -> Path:
    return Path(os.environ.get("ZORILLA_BIN_DIR") or REPO / "target" / "debug")


def binary(name: str) -> str:
    """The path of binary ``name``; skips the test if there is none (fails
    if ZORILLA_BIN_DIR named where it should be)."""
    path = bin_dir() / name
    if not os.access(path, os.X_OK):
        message = f"no {path}: build it with `cargo build -p zorilla-node --bins`"
        if os.environ.get("ZORILLA_BIN_DIR"):
            raise AssertionError(message)
        raise unittest.SkipTest(message)
    return str(path)


def _die_with_parent() -> None:
    """Run in the child before it executes the node: the kernel kills it
    when the test process ends, however that ends (Linux's
    PR_SET_PDEATHSIG), so that no node outlives its test."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: stop() is then the only stop


def clean_env(**extra: str) -> Dict[str, str]:
    """This process's environment without the ZORILLA_ variables of the
    person running the tests (a token, a user key, a node), plus
    ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZORILLA_")}
    env.update(extra)
    return env


class Node:
    """A running `zorilla-node`."""

    def __init__(self, state_dir: Path, token: Optional[str] = None, cores: int = 2):
        self.state_dir = state_dir
        state_dir.mkdir(parents=True, exist_ok=True)
        args = [
            binary("zorilla-node"),
            "--state-dir", str(state_dir),
            "--network", f"python-test-{os.getpid()}",
            "--client", "127.0.0.1:0",
            "--listen", "/ip4/127.0.0.1/tcp/0",
            "--mdns", "false",
            "--cores", str(cores),
            "--memory-mib", "1024",
            "--disk-mib", "1000",
            "--cpu-speed", "1000",
        ]
        if token is not None:
            args += ["--token", token]
        self.log = state_dir / "node.log"
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=log,
                env=clean_env(RUST_LOG="info,zorilla_overlay=warn,libp2p=warn"),
                preexec_fn=_die_with_parent,
            )
        ready: "queue.Queue[Optional[str]]" = queue.Queue()
        threading.Thread(target=self._drain, args=(ready,), daemon=True).start()
        try:
            line = ready.get(timeout=READY_TIMEOUT)
        except queue.Empty:
            line = None
        if line is None:
            self.stop()
            raise AssertionError(f"zorilla-node did not get ready; its log ends:\n{self.log_tail()}")
        fields = dict(w.split("=", 1) for w in line[len(READY_PREFIX):].split() if "=" in w)
        #: Its peer id and client address, from its ready line.
        self.peer: str = fields["peer"]
        self.client: str = fields["client"]

    def _drain(self, ready: "queue.Queue[Optional[str]]") -> None:
        """Reads the node's stdout to its end (so that it never blocks on a
        full pipe), handing on the ready line, or None at the end."""
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            line = raw.decode(errors="replace").strip()
            if line.startswith(READY_PREFIX):
                ready.put(line)
        ready.put(None)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        """Stops the node (SIGTERM, then SIGKILL if it does not end in
        time)."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=STOP_TIMEOUT)
        if self.process.stdout is not None:
            self.process.stdout.close()


def zorilla(*args: str, user_key: Path) -> Dict:
    """Runs the `zorilla` tool with ``args`` and ``--json`` as the user
    whose key is ``user_key``, and returns what it printed."""
    result = subprocess.run(
        [binary("zorilla"), "--user-key", str(user_key), *args, "--json"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        env=clean_env(),
        timeout=60,
    )
    if result.returncode != 0:
        raise AssertionError(f"zorilla {' '.join(args)} exited {result.returncode}: {result.stderr.decode()}")
    return json.loads(result.stdout)


def module(name: str) -> bytes:
    """The bytes of a committed example guest, examples/wasm/NAME.wasm."""
    return (EXAMPLES / f"{name}.wasm").read_bytes()


def all_of(iterator, limit: int = 100000) -> List:
    """Every item of ``iterator``, failing past ``limit`` of them (a loop
    the test bounds in count as well as in time)."""
    items = []
    for item in iterator:
        items.append(item)
        if len(items) > limit:
            raise AssertionError(f"more than {limit} items")
    return items
