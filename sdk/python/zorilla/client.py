"""A connection to a node's client port, acting as one user: it submits
jobs signed with the user's key, follows them, fetches their outputs and
cancels them, proving to each job's home that the user owns it
(docs/protocol.md).

>>> from zorilla import Client, JobRequest
>>> with Client.connect() as node:                     # the local node
...     job = node.submit(open("hello.wasm", "rb").read(), JobRequest(args=["one"]),
...                       inputs={"name.txt": b"reader"})
...     for chunk in node.follow(job):                 # its logs, until it ends
...         print(chunk.data.decode(), end="")
...     print(node.status(job).phase)
...     node.fetch(job, "results")                     # results/<rank>/<file>

One connection answers one request at a time, in order: use a client per
thread (or connect several) for concurrency.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import time
from pathlib import Path, PurePosixPath
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from . import requests as rq
from . import wire
from .errors import ConnectionFailed, NodeError, ProtocolError, StaleError, node_error
from .messages import (
    JobRequest,
    JobStatus,
    LogChunk,
    LogPage,
    NamedFile,
    NodeInfo,
    OutputData,
    OutputEntry,
    OutputPage,
    PeerEntry,
    Tasks,
    Welcome,
)
from .user import UserKey

#: The protocol version this package speaks.
PROTOCOL_VERSION = 3
#: How long a connection and its hello may take.
CONNECT_TIMEOUT = 10.0
#: How long an answer may take: longer than the longest a Logs request
#: waits (60 s).
ANSWER_TIMEOUT = 120.0
#: The most jobs a client keeps a home's nonce for.
MAX_SESSIONS = 1024
#: The input :meth:`Client.submit_array` puts a job array's lines of task
#: arguments in.
TASK_ARGS_FILE = "task_args.txt"

Module = Union[bytes, bytearray, memoryview, str, os.PathLike]
Inputs = Union[Mapping[str, bytes], Sequence[NamedFile], None]


def local_node_address() -> str:
    """The client address of the local node, as the `zorilla` tool finds
    it: ``$ZORILLA_NODE``, else the ``client.addr`` file in
    ``$ZORILLA_STATE_DIR``, else in the node's default state directory
    (``$XDG_DATA_HOME/zorilla``, ``~/.local/share/zorilla``), else
    ``/var/lib/zorilla`` (the systemd service's)."""
    if os.environ.get("ZORILLA_NODE"):
        return os.environ["ZORILLA_NODE"]
    candidates = []
    if os.environ.get("ZORILLA_STATE_DIR"):
        candidates.append(Path(os.environ["ZORILLA_STATE_DIR"]))
    else:
        data = os.environ.get("XDG_DATA_HOME") or (
            os.path.join(os.environ["HOME"], ".local", "share") if os.environ.get("HOME") else "."
        )
        candidates += [Path(data) / "zorilla", Path("/var/lib/zorilla")]
    for directory in candidates:
        try:
            with open(directory / "client.addr", encoding="utf-8", errors="replace") as f:
                return f.read(1024).strip()
        except OSError:
            continue
    raise ConnectionFailed(
        f"no local node found (no {candidates[0] / 'client.addr'}): start one with `zorilla-node`, "
        "or give its address (HOST:PORT) or set ZORILLA_NODE"
    )


def _split_address(addr: str) -> Tuple[str, int]:
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit():
        raise ConnectionFailed(f"{addr!r} is not a node's client address (HOST:PORT)")
    return host.strip("[]"), int(port)


def _named_files(inputs: Inputs) -> List[NamedFile]:
    if inputs is None:
        return []
    if isinstance(inputs, Mapping):
        return [NamedFile(name, bytes(data)) for name, data in inputs.items()]
    return list(inputs)


def _task_args_file(lines: Sequence[str]) -> bytes:
    """A job array's task arguments file: a line per task. A line may not
    hold a line break (it would be two tasks' lines) nor a NUL."""
    for i, line in enumerate(lines):
        if not isinstance(line, str):
            raise ValueError(f"task {i}'s arguments are {type(line).__name__}, not a line of text")
        if "\n" in line or "\0" in line:
            raise ValueError(f"task {i}'s line of arguments {line!r:.80} holds a line break or a NUL")
    return "".join(line + "\n" for line in lines).encode()


def _module_bytes(module: Module) -> bytes:
    if isinstance(module, (bytes, bytearray, memoryview)):
        return bytes(module)
    with open(module, "rb") as f:
        return f.read(wire.MAX_FRAME + 1)


class Client:
    """A connection to one node, after the handshake, acting as ``user``."""

    def __init__(self, sock: socket.socket, welcome: Welcome, user: UserKey):
        self._sock = sock
        #: What the node said in the handshake (its peer id, the nonce).
        self.welcome = welcome
        #: The user this client acts as.
        self.user = user
        # Per job: the nonce its home gave, and the last sequence number used.
        self._sessions: Dict[int, Tuple[bytes, int]] = {}

    # --- connecting ------------------------------------------------------------

    @classmethod
    def connect(
        cls,
        addr: Optional[str] = None,
        *,
        token: Optional[str] = None,
        user: Optional[UserKey] = None,
        name: str = "zorilla-python",
        timeout: float = ANSWER_TIMEOUT,
    ) -> "Client":
        """Connects to the node at ``addr`` (``HOST:PORT``; default: the
        local node, :func:`local_node_address`) and shakes hands,
        presenting ``token`` (default: ``$ZORILLA_TOKEN``). The client acts
        as ``user`` (default: the `zorilla` tool's user,
        :meth:`UserKey.load_or_create`). ``timeout`` bounds the wait for
        each answer."""
        if addr is None:
            addr = local_node_address()
        if token is None:
            token = os.environ.get("ZORILLA_TOKEN") or None
        if user is None:
            user = UserKey.load_or_create()
        host, port = _split_address(addr)
        try:
            sock = socket.create_connection((host, port), timeout=CONNECT_TIMEOUT)
        except OSError as e:
            raise ConnectionFailed(f"cannot reach a node at {addr}: {e}") from e
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            hello = {"version": PROTOCOL_VERSION, "client": name, "token": token}
            wire.send(sock, hello, wire.HELLO_MAX_FRAME)
            welcome = cls._answer(sock, "Welcome")
            sock.settimeout(timeout)
        except BaseException:
            sock.close()
            raise
        return cls(sock, Welcome.from_wire(welcome), user)

    def close(self) -> None:
        """Closes the connection."""
        self._sock.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def peer(self) -> str:
        """The peer id of the node connected to."""
        return self.welcome.peer

    # --- requests ----------------------------------------------------------------

    @staticmethod
    def _answer(sock: socket.socket, expected: str) -> Any:
        """Reads one response: its data if it is ``expected``, the node's
        error raised as its exception."""
        response = wire.receive(sock)
        if isinstance(response, dict) and len(response) == 1:
            ((variant, data),) = response.items()
        elif isinstance(response, str):
            variant, data = response, None
        else:
            raise ProtocolError(f"the node answered with something else than a response: {response!r:.120}")
        if variant == "Error":
            if not isinstance(data, dict) or not isinstance(data.get("kind"), str):
                raise ProtocolError(f"an error without a kind: {data!r:.120}")
            raise node_error(data["kind"], str(data.get("message", "")))
        if variant != expected:
            raise ProtocolError(f"the node answered {variant} to a request answered by {expected}")
        return data

    def _send(self, request: rq.Request) -> Any:
        """Sends ``request`` as it is and reads its answer. A failure of the
        connection or of the protocol closes it: what follows on it could
        not be trusted. A request too large for a frame is refused before
        anything is sent, and the connection goes on."""
        data = wire.frame(request.to_wire())
        try:
            wire.send_frame(self._sock, data)
            return request.read(self._answer(self._sock, request.answer))
        except NodeError:
            raise
        except (ConnectionFailed, ProtocolError):
            self.close()
            raise

    def call(self, request: rq.Request) -> Any:
        """Sends one request and returns its answer, read as this package's
        type. A request only a job's owner may make goes with this user's
        proof (a nonce of the job's home is asked for first, and once more
        if the home no longer knows it)."""
        job = request.job_of()
        if job is None:
            return self._send(request)
        for attempt in range(2):
            nonce, seq = self._session(job)
            proof = self.user.prove(nonce, seq, request)
            try:
                return self._send(rq.Owner(proof, request))
            except StaleError:
                self._sessions.pop(job, None)
                if attempt == 1:
                    raise
        raise AssertionError("the second attempt returns or raises")

    def _session(self, job: int) -> Tuple[bytes, int]:
        if job in self._sessions:
            nonce, seq = self._sessions[job]
            self._sessions[job] = (nonce, seq + 1)
            return nonce, seq + 1
        nonce = self._send(rq.Challenge(job))
        if len(self._sessions) >= MAX_SESSIONS:
            self._sessions.clear()
        self._sessions[job] = (nonce, 0)
        return nonce, 0

    # --- jobs --------------------------------------------------------------------

    def submit(self, module: Module, job: Optional[JobRequest] = None, inputs: Inputs = None) -> int:
        """Submits a job running ``module`` (its bytes, or a path), signed
        by this client's user, whose job it is; this node becomes its home.
        ``inputs`` (a mapping of plain names to bytes, or NamedFiles) are
        what workers read under ``/inputs``. Returns the job's id. A job
        array the node would refuse raises ``ValueError`` before anything
        is sent (:meth:`JobRequest.check_array`)."""
        job = job if job is not None else JobRequest()
        job.check_array()
        module = _module_bytes(module)
        files = _named_files(inputs)
        owner = self.user.sign_submission(self.welcome.nonce, job, module, files)
        return self.call(rq.Submit(job, module, files, owner))

    def submit_array(
        self,
        module: Module,
        tasks: Union[int, Sequence[str]],
        job: Optional[JobRequest] = None,
        inputs: Inputs = None,
        *,
        max_running: Optional[int] = None,
        retries: int = 0,
    ) -> int:
        """Submits a job array running ``module``: ``tasks`` is how many
        tasks, or a line of arguments per task (task ``i`` gets the words of
        ``tasks[i]``, split at white space, after the job's ``args``; the
        lines go as the input ``task_args.txt``, :data:`TASK_ARGS_FILE`).
        Each task is a worker of its own that sees its index in
        ``ZORILLA_TASK``, and writes its outputs under ``<task>/``. At most
        ``max_running`` run at once (default, and at most: all of them); a
        task that fails runs again up to ``retries`` times. ``job`` gives
        what every task asks for (cores, memory, args, ...); its worker
        counts and ``tasks`` are replaced. Returns the job's id; raises
        ``ValueError`` for an array the node would refuse."""
        job = job if job is not None else JobRequest()
        files = _named_files(inputs)
        if isinstance(tasks, int):
            count, args_file = tasks, None
        else:
            if isinstance(tasks, str):
                raise ValueError("tasks is a count or a sequence of lines, one per task, not one string")
            if any(f.name == TASK_ARGS_FILE for f in files):
                raise ValueError(f"an input is named {TASK_ARGS_FILE}, where the tasks' lines of arguments go")
            count, args_file = len(tasks), TASK_ARGS_FILE
            files.append(NamedFile(TASK_ARGS_FILE, _task_args_file(tasks)))
        running = count if max_running is None else min(max_running, count)
        array = dataclasses.replace(
            job, min_workers=1, max_workers=running, tasks=Tasks(count, retries, args_file)
        )
        return self.submit(module, array, files)

    def status(self, job: int) -> JobStatus:
        """The status of a job (in full to its owner; to anybody else only
        that it exists, its owner, phase and size)."""
        return self.call(rq.Status(job))

    def list(self) -> List[JobStatus]:
        """Every job this node is home to."""
        return self.call(rq.ListJobs())

    def cancel(self, job: int) -> JobStatus:
        """Cancels a job; returns its status after the cancel."""
        return self.call(rq.Cancel(job))

    def resize(self, job: int, max_workers: int) -> JobStatus:
        """Changes the most workers a malleable job may use (a job array's:
        how many tasks run at once, up to its count)."""
        return self.call(rq.Resize(job, max_workers))

    def logs_page(self, job: int, from_: int = 0, wait_secs: int = 0) -> LogPage:
        """One page of a job's logs from chunk ``from_`` on, waiting up to
        ``wait_secs`` (at most 60) for new ones if there are none yet."""
        return self.call(rq.Logs(job, from_, wait_secs))

    def logs(self, job: int) -> List[LogChunk]:
        """Every chunk of stdout and stderr collected so far."""
        chunks: List[LogChunk] = []
        start = 0
        while True:
            page = self.logs_page(job, start, 0)
            chunks += page.chunks
            if page.ended or not page.chunks or page.next <= start:
                return chunks
            start = page.next

    def follow(self, job: int, timeout: Optional[float] = None) -> Iterator[LogChunk]:
        """Yields a job's stdout and stderr as they arrive, from the start,
        until the job is over (then its last chunks). The node holds each
        request until there is something new or the job ends, so nothing is
        polled. Raises ``TimeoutError`` if the job is not over within
        ``timeout`` seconds (default: no limit)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        start = 0
        while True:
            wait = rq.MAX_WAIT_SECS
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"job {job:016x} was not over within {timeout} s")
                wait = max(1, min(wait, int(left)))
            page = self.logs_page(job, start, wait)
            yield from page.chunks
            if page.ended:
                return
            if page.next < start:
                raise ProtocolError(f"the logs went back from chunk {start} to {page.next}")
            start = page.next

    def wait(self, job: int, timeout: Optional[float] = None) -> JobStatus:
        """Waits until a job is over and returns its final status (follows
        its logs, :meth:`follow`, and drops them). Raises ``TimeoutError``
        after ``timeout`` seconds (default: no limit)."""
        for _ in self.follow(job, timeout):
            pass
        return self.status(job)

    # --- outputs -----------------------------------------------------------------

    def output_pages(self, job: int) -> Iterator[OutputPage]:
        """A job's output files collected so far, page by page (at most
        4096 a page, in name order)."""
        after = ""
        while True:
            page: OutputPage = self.call(rq.Outputs(job, after))
            yield page
            if not page.more or not page.files:
                return
            if page.files[-1].name <= after:
                raise ProtocolError("a page of outputs did not move past the last one")
            after = page.files[-1].name

    def outputs(self, job: int) -> List[OutputEntry]:
        """Every output file of a job collected so far (names ``rank/path``
        and sizes)."""
        return [f for page in self.output_pages(job) for f in page.files]

    def output_block(
        self, job: int, name: str, offset: int, length: int = rq.MAX_OUTPUT_BLOCK_BYTES
    ) -> OutputData:
        """Up to ``length`` bytes (at most 4 MiB) of output file ``name``
        from ``offset``, and the file's size now."""
        return self.call(rq.OutputBlock(job, name, offset, length))

    def output_blocks(self, job: int, name: str) -> Iterator[bytes]:
        """The bytes of output file ``name``, block by block, from its
        start to its end as it stands (a block may be shorter than asked)."""
        offset = 0
        while True:
            block = self.output_block(job, name, offset)
            if not block.data:
                return
            yield block.data
            offset += len(block.data)
            if offset >= block.size:
                return

    def read_output(self, job: int, name: str) -> bytes:
        """A whole output file, for one that fits in memory (:meth:`fetch`
        streams to disk)."""
        return b"".join(self.output_blocks(job, name))

    def fetch(self, job: int, dest: Union[str, os.PathLike]) -> List[Path]:
        """Writes every output file of a job into ``dest`` as
        ``dest/<rank>/<path>`` (a job array's: ``dest/<task>/<path>``),
        streamed block by block; returns the paths
        written. A name that would leave ``dest`` (absolute, or with
        ``..``) is refused with a ProtocolError."""
        dest = Path(dest)
        written = []
        for entry in self.outputs(job):
            parts = PurePosixPath(entry.name).parts
            if not parts or entry.name.startswith("/") or any(p in ("..", ".", "") for p in parts):
                raise ProtocolError(
                    f"the node named an output {entry.name!r:.120}, which is no path below the job's"
                )
            path = dest.joinpath(*parts)
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "wb") as f:
                for data in self.output_blocks(job, entry.name):
                    f.write(data)
            written.append(path)
        return written

    # --- the node ----------------------------------------------------------------

    def node_info(self) -> NodeInfo:
        """What the node is and has."""
        return self.call(rq.NodeInfo())

    def peers(self) -> List[PeerEntry]:
        """The peers the node knows, nearest first."""
        return self.call(rq.Peers())
