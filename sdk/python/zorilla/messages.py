"""The values the protocol carries, as dataclasses with the field names of
docs/protocol.md ("Requests", "Responses"): what a job asks for
(:class:`JobRequest`, a job array's :class:`Tasks`), how it stands
(:class:`JobStatus`, :class:`RankStatus`, :class:`TaskStatus`,
:class:`Pending`), its logs and outputs, and what a node is
(:class:`NodeInfo`, :class:`PeerEntry`).

Each type has ``to_wire`` (the CBOR value the node reads) or
``from_wire`` (from the CBOR value the node sent; a field of the wrong type
raises :class:`~zorilla.errors.ProtocolError`, unknown fields are
ignored, as the protocol lets a newer node add fields).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Union

from .errors import ProtocolError


# --- reading values the node sent, checking their types ---------------------


def _expect(value: Any, kind: Union[type, tuple], what: str) -> Any:
    # bool is an int in Python; the protocol never mixes them.
    if isinstance(value, bool) and kind is int:
        raise ProtocolError(f"{what} is {value!r}, not an integer")
    if not isinstance(value, kind):
        raise ProtocolError(f"{what} is {type(value).__name__} {value!r:.80}, not as the protocol says")
    return value


def _map(value: Any, what: str) -> Dict[Any, Any]:
    return _expect(value, dict, what)


def _field(d: Dict[Any, Any], name: str, kind: Union[type, tuple], what: str, default: Any = ...) -> Any:
    if name not in d:
        if default is ...:
            raise ProtocolError(f"{what} has no field {name!r}")
        return default
    value = d[name]
    if value is None and default is None:
        return None
    return _expect(value, kind, f"{what}.{name}")


def _uint(d: Dict[Any, Any], name: str, what: str, default: Any = ...) -> Any:
    value = _field(d, name, int, what, default)
    if isinstance(value, int) and value < 0:
        raise ProtocolError(f"{what}.{name} is {value}, not an unsigned integer")
    return value


def _enum(cls: Any, value: Any, what: str) -> Any:
    try:
        return cls(value)
    except ValueError:
        raise ProtocolError(f"{what} is {value!r:.80}, not one of {[m.value for m in cls]}") from None


# --- enumerations ------------------------------------------------------------


class Phase(str, enum.Enum):
    """The phase of a job. Phases only move forward; the last three are
    final."""

    SCHEDULING = "scheduling"
    RUNNING = "running"
    COMPLETED = "completed"
    CANCELLED = "cancelled"
    FAILED = "failed"

    @property
    def is_terminal(self) -> bool:
        """Whether the job is over."""
        return self in (Phase.COMPLETED, Phase.CANCELLED, Phase.FAILED)


class Strategy(str, enum.Enum):
    """How the home maps a job's workers onto the nodes that offered them."""

    SPREAD = "spread"
    CONCENTRATE = "concentrate"


class OnWorkerLost(str, enum.Enum):
    """What a rigid job does when it loses a worker."""

    FAIL = "fail"
    REPLACE = "replace"
    ROLLBACK = "rollback"


class Arch(str, enum.Enum):
    """A machine architecture native jobs are built for."""

    X86_64 = "x86_64"
    AARCH64 = "aarch64"
    RISCV64 = "riscv64"


class OutcomeCode(str, enum.Enum):
    """How a rank ended, for programs (stable; the node may add codes, which
    :class:`RankStatus` then keeps as plain text)."""

    EXITED = "exited"
    TRAPPED = "trapped"
    OUT_OF_MEMORY = "out_of_memory"
    CPU_LIMIT = "cpu_limit"
    TIME_LIMIT = "time_limit"
    OUTPUT_LIMIT = "output_limit"
    DISK_LIMIT = "disk_limit"
    PROCESS_LIMIT = "process_limit"
    NOT_STARTED = "not_started"
    CANCELLED = "cancelled"
    LOST = "lost"
    STOPPED = "stopped"
    DISPUTED = "disputed"


@dataclass(frozen=True)
class Kind:
    """What a job's workers are: WebAssembly modules (``native`` None, the
    default) or native executables for the architecture ``native``."""

    native: Optional[Arch] = None

    @property
    def is_wasm(self) -> bool:
        return self.native is None

    def to_wire(self) -> Any:
        return "wasm" if self.native is None else {"native": Arch(self.native).value}

    @classmethod
    def from_wire(cls, value: Any) -> "Kind":
        if value == "wasm":
            return cls()
        if isinstance(value, dict) and set(value) == {"native"}:
            return cls(_enum(Arch, value["native"], "kind.native"))
        raise ProtocolError(f"kind is {value!r:.80}, not \"wasm\" or {{\"native\": ARCH}}")


# --- what a job asks for -----------------------------------------------------

#: The most tasks one job array may have.
MAX_TASKS = 10_000
#: The most times a failed task of a job array runs again.
MAX_TASK_RETRIES = 10


@dataclass
class Tasks:
    """A job array's tasks (``JobRequest.tasks``): ``count`` independent
    tasks of the module, numbered from 0, each a worker of its own (a world
    of one) that sees its index in ``ZORILLA_TASK`` and ``count`` in
    ``ZORILLA_TASKS``. A task that fails runs again, on another node if one
    offers, up to ``retries`` times (0 to 10). ``args_file`` names one of
    the job's inputs with a line per task: task ``i`` gets the words of
    line ``i`` (split at white space) after the job's ``args``.
    ``spot_checks`` (0 to 100) is the percentage of tasks that exited with
    status 0 the home runs once more on another node, comparing results (a
    deterministic job only)."""

    count: int
    retries: int = 0
    args_file: Optional[str] = None
    spot_checks: int = 0

    def to_wire(self) -> Dict[str, Any]:
        """In the node's order, ``args_file`` left out when ``None`` as the
        node does."""
        wire: Dict[str, Any] = {"count": int(self.count), "retries": int(self.retries)}
        if self.args_file is not None:
            wire["args_file"] = str(self.args_file)
        if self.spot_checks != 0:
            wire["spot_checks"] = int(self.spot_checks)
        return wire

    @classmethod
    def from_wire(cls, value: Any) -> "Tasks":
        d = _map(value, "request.tasks")
        w = "request.tasks"
        return cls(
            count=_uint(d, "count", w),
            retries=_uint(d, "retries", w, 0),
            args_file=_field(d, "args_file", str, w, None),
            spot_checks=_uint(d, "spot_checks", w, 0),
        )


@dataclass
class JobRequest:
    """What a job asks for. Every field has the node's default; the node
    refuses a value out of its range with a :class:`~zorilla.errors.BadRequestError`
    naming it (docs/protocol.md lists the ranges)."""

    min_workers: int = 1
    max_workers: int = 1
    cores: int = 1
    memory_mib: int = 64
    disk_mib: int = 0
    strategy: Strategy = Strategy.CONCENTRATE
    lifetime_secs: int = 60
    on_worker_lost: OnWorkerLost = OnWorkerLost.FAIL
    args: List[str] = field(default_factory=list)
    wall_time_secs: int = 0
    cpu_time_secs: int = 0
    kind: Kind = field(default_factory=Kind)
    #: A seed for a deterministic job (the same output bits in every run and
    #: on every node; WebAssembly and a fixed size only), or ``None``.
    deterministic: Optional[int] = None
    #: Among the user's own jobs waiting for the same cores of a node,
    #: higher goes first (-128 to 127); other users' jobs keep their turn.
    priority: int = 0
    #: A job array (:class:`Tasks`), or ``None``: ``min_workers`` is then 1
    #: and ``max_workers`` how many tasks run at once (at most ``count``).
    tasks: Optional[Tasks] = None
    #: How many times the job runs (1 to 3), each run on nodes no other
    #: run uses, the runs' results compared at its home: the majority's are
    #: kept and nodes that gave others named and avoided. More than 1
    #: needs ``deterministic`` and a fixed size, or a job array (each task
    #: then runs on two nodes, and on a third if they differ).
    replicas: int = 1

    @classmethod
    def workers(cls, n: int, **fields: Any) -> "JobRequest":
        """A rigid job of exactly ``n`` workers."""
        return cls(min_workers=n, max_workers=n, **fields)

    @classmethod
    def array(
        cls,
        count: int,
        max_running: Optional[int] = None,
        retries: int = 0,
        args_file: Optional[str] = None,
        spot_checks: int = 0,
        **fields: Any,
    ) -> "JobRequest":
        """A job array of ``count`` tasks (:class:`Tasks`), at most
        ``max_running`` of them running at once (default, and at most: all
        of them, as the `zorilla` tool does), each that fails run again up
        to ``retries`` times, ``spot_checks`` % of them checked on another
        node (deterministic with seed 0 unless ``deterministic`` says). Raises ``ValueError`` for an array the node
        would refuse (:meth:`check_array`)."""
        running = count if max_running is None else min(max_running, count)
        if spot_checks and fields.get("deterministic") is None:
            fields["deterministic"] = 0
        tasks = Tasks(count, retries, args_file, spot_checks)
        job = cls(min_workers=1, max_workers=running, tasks=tasks, **fields)
        job.check_array()
        return job

    def check_array(self) -> None:
        """Raises ``ValueError``, naming the field and its range as the
        node's :class:`~zorilla.errors.BadRequestError` would, for a job
        array the node would refuse: ``count`` not 1 to 10,000, ``retries``
        over 10, ``max_workers`` (how many run at once) not 1 to ``count``,
        ``min_workers`` not 1, or ``on_worker_lost`` ``"rollback"``.
        :meth:`Client.submit <zorilla.client.Client.submit>` checks so
        before anything is signed or sent. Nothing for a job of ranks."""
        tasks = self.tasks
        if tasks is None:
            return
        if not 1 <= tasks.count <= MAX_TASKS:
            raise ValueError(f"tasks is {tasks.count}, but must be from 1 to {MAX_TASKS}")
        if not 1 <= self.max_workers <= tasks.count:
            raise ValueError(
                f"max_running is {self.max_workers}, but must be from 1 to {tasks.count} "
                "(a job array's max_workers is how many of its tasks run at once)"
            )
        if not 0 <= tasks.retries <= MAX_TASK_RETRIES:
            raise ValueError(f"retries is {tasks.retries}, but must be at most {MAX_TASK_RETRIES}")
        if not 0 <= tasks.spot_checks <= 100:
            raise ValueError(f"spot_checks is {tasks.spot_checks}, but must be at most 100")
        if tasks.spot_checks and self.deterministic is None:
            raise ValueError(
                "a job array with spot checks must be deterministic: a task run twice that "
                "reads the clock or fresh random bytes would never agree with itself"
            )
        if self.min_workers != 1:
            raise ValueError(
                f"a job array runs 1 to max_running ({self.max_workers}) workers at once, "
                f"not {self.min_workers} to {self.max_workers}"
            )
        if OnWorkerLost(self.on_worker_lost) == OnWorkerLost.ROLLBACK:
            raise ValueError(
                "a job array's tasks are independent: a lost task runs again by itself, so "
                'on_worker_lost = "rollback" does not apply'
            )

    def to_wire(self) -> Dict[str, Any]:
        """Every field, in the order of the node's type (what a signed
        submission signs), the optional ones left out as the node does:
        ``kind`` for WebAssembly, ``deterministic`` and ``tasks`` when
        ``None``, ``priority`` when 0, ``replicas`` when 1."""
        wire: Dict[str, Any] = {
            "min_workers": int(self.min_workers),
            "max_workers": int(self.max_workers),
            "cores": int(self.cores),
            "memory_mib": int(self.memory_mib),
            "disk_mib": int(self.disk_mib),
            "strategy": Strategy(self.strategy).value,
            "lifetime_secs": int(self.lifetime_secs),
            "on_worker_lost": OnWorkerLost(self.on_worker_lost).value,
            "args": [str(a) for a in self.args],
            "wall_time_secs": int(self.wall_time_secs),
            "cpu_time_secs": int(self.cpu_time_secs),
        }
        if not self.kind.is_wasm:
            wire["kind"] = self.kind.to_wire()
        if self.deterministic is not None:
            wire["deterministic"] = int(self.deterministic)
        if self.priority != 0:
            wire["priority"] = int(self.priority)
        if self.tasks is not None:
            wire["tasks"] = self.tasks.to_wire()
        if self.replicas != 1:
            wire["replicas"] = int(self.replicas)
        return wire

    @classmethod
    def from_wire(cls, value: Any) -> "JobRequest":
        d = _map(value, "request")
        w = "request"
        default = cls()
        args = _field(d, "args", list, w, [])
        return cls(
            min_workers=_uint(d, "min_workers", w, default.min_workers),
            max_workers=_uint(d, "max_workers", w, default.max_workers),
            cores=_uint(d, "cores", w, default.cores),
            memory_mib=_uint(d, "memory_mib", w, default.memory_mib),
            disk_mib=_uint(d, "disk_mib", w, default.disk_mib),
            strategy=_enum(Strategy, d.get("strategy", default.strategy.value), "request.strategy"),
            lifetime_secs=_uint(d, "lifetime_secs", w, default.lifetime_secs),
            on_worker_lost=_enum(OnWorkerLost, d.get("on_worker_lost", "fail"), "request.on_worker_lost"),
            args=[_expect(a, str, "request.args[]") for a in args],
            wall_time_secs=_uint(d, "wall_time_secs", w, 0),
            cpu_time_secs=_uint(d, "cpu_time_secs", w, 0),
            kind=Kind.from_wire(d.get("kind", "wasm")),
            deterministic=_uint(d, "deterministic", w, None),
            priority=_field(d, "priority", int, w, 0),
            tasks=None if d.get("tasks") is None else Tasks.from_wire(d["tasks"]),
            replicas=_uint(d, "replicas", w, 1),
        )


@dataclass
class NamedFile:
    """An input file: a plain name (no ``/``) and its bytes; workers read it
    under ``/inputs``."""

    name: str
    data: bytes

    def to_wire(self) -> Dict[str, Any]:
        return {"name": self.name, "data": bytes(self.data)}


# --- how a job stands --------------------------------------------------------


@dataclass
class RankStatus:
    """How one rank of a job stands: the node running (or that ran) it, and
    once it ended, how (``outcome`` for people, ``code`` for programs)."""

    node: str
    outcome: Optional[str] = None
    code: Union[OutcomeCode, str, None] = None
    exit_status: Optional[int] = None

    @property
    def running(self) -> bool:
        return self.outcome is None

    @property
    def succeeded(self) -> bool:
        """Whether it exited with status 0 (the only success)."""
        return self.code == OutcomeCode.EXITED and self.exit_status == 0

    @classmethod
    def from_wire(cls, value: Any, what: str) -> "RankStatus":
        d = _map(value, what)
        code = _field(d, "code", str, what, None)
        if code is not None:
            try:
                code = OutcomeCode(code)
            except ValueError:
                pass  # a code newer than this package: kept as text
        return cls(
            node=_field(d, "node", str, what),
            outcome=_field(d, "outcome", str, what, None),
            code=code,
            exit_status=_field(d, "exit_status", int, what, None),
        )


def _rank_map(d: Dict[Any, Any], name: str, what: str) -> Dict[int, RankStatus]:
    """A map of ranks (or tasks) to their :class:`RankStatus`."""
    ranks = {}
    for rank, r in _field(d, name, dict, what, {}).items():
        rank = _expect(rank, int, f"{what}.{name} key")
        ranks[rank] = RankStatus.from_wire(r, f"{what}.{name}[{rank}]")
    return ranks


@dataclass
class TaskStatus:
    """A job array's progress: how many of its ``count`` tasks wait (to
    start, or to run again), run, are done (exited with status 0) and
    failed for good (after their retries); and the failed ones, lowest
    first (at most 1000 listed; ``failed`` counts them all), each with its
    last run's node and end as a rank's. Of a spot-checked array: the
    tasks a check settled (``checked``) or has yet to (``checking``), and
    the nodes caught giving results two others disagreed with."""

    count: int
    waiting: int = 0
    running: int = 0
    done: int = 0
    failed: int = 0
    failed_tasks: Dict[int, RankStatus] = field(default_factory=dict)
    checked: int = 0
    checking: int = 0
    caught: List[str] = field(default_factory=list)

    @classmethod
    def from_wire(cls, value: Any) -> "TaskStatus":
        d = _map(value, "status.tasks")
        w = "status.tasks"
        return cls(
            count=_uint(d, "count", w),
            waiting=_uint(d, "waiting", w, 0),
            running=_uint(d, "running", w, 0),
            done=_uint(d, "done", w, 0),
            failed=_uint(d, "failed", w, 0),
            failed_tasks=_rank_map(d, "failed_tasks", w),
            checked=_uint(d, "checked", w, 0),
            checking=_uint(d, "checking", w, 0),
            caught=[str(n) for n in _field(d, "caught", list, w, [])],
        )


@dataclass
class Pending:
    """What the home knows of a job's search for workers: why it waits."""

    floods: int = 0
    radius: int = 0
    budget_ms: Optional[int] = None
    nodes_answered: int = 0
    offers: int = 0
    workers_offered: int = 0
    declines: Dict[str, int] = field(default_factory=dict)
    refusals: Dict[str, int] = field(default_factory=dict)
    granted: int = 0
    needed: int = 0
    apart: int = 0

    @classmethod
    def from_wire(cls, value: Any) -> "Pending":
        d = _map(value, "pending")
        w = "pending"
        counts = lambda name: {  # noqa: E731
            _expect(k, str, f"{w}.{name} key"): _expect(v, int, f"{w}.{name}[{k!r}]")
            for k, v in _field(d, name, dict, w, {}).items()
        }
        return cls(
            floods=_uint(d, "floods", w, 0),
            radius=_uint(d, "radius", w, 0),
            budget_ms=_field(d, "budget_ms", int, w, None),
            nodes_answered=_uint(d, "nodes_answered", w, 0),
            offers=_uint(d, "offers", w, 0),
            workers_offered=_uint(d, "workers_offered", w, 0),
            declines=counts("declines"),
            refusals=counts("refusals"),
            granted=_uint(d, "granted", w, 0),
            needed=_uint(d, "needed", w, 0),
            apart=_uint(d, "apart", w, 0),
        )


@dataclass
class JobStatus:
    """A job's status. To anybody but its owner (and its home's admin) only
    ``job``, ``phase``, ``owner`` and the request's worker counts are
    filled in; the other fields are empty. A job array's ``tasks`` is its
    progress (``None`` for a job of ranks), and its ``ranks`` are the
    tasks running, by task index (the home keeps no record of an ended
    task but its count, and the failed ones)."""

    job: int
    phase: Phase
    reason: str
    ranks: Dict[int, RankStatus]
    request: JobRequest
    pending: Optional[Pending] = None
    submitted_unix: int = 0
    home: Optional[str] = None
    moved_from: Optional[str] = None
    owner: Optional[str] = None
    tasks: Optional[TaskStatus] = None

    @property
    def is_terminal(self) -> bool:
        """Whether the job is over (completed, cancelled or failed)."""
        return self.phase.is_terminal

    @property
    def id(self) -> str:
        """The job id as the `zorilla` tool shows it (16 hex digits)."""
        return format_job_id(self.job)

    @classmethod
    def from_wire(cls, value: Any) -> "JobStatus":
        d = _map(value, "status")
        w = "status"
        pending = d.get("pending")
        tasks = d.get("tasks")
        return cls(
            job=_uint(d, "job", w),
            phase=_enum(Phase, _field(d, "phase", str, w), "status.phase"),
            reason=_field(d, "reason", str, w, ""),
            ranks=_rank_map(d, "ranks", w),
            request=JobRequest.from_wire(_field(d, "request", dict, w, {})),
            pending=None if pending is None else Pending.from_wire(pending),
            submitted_unix=_uint(d, "submitted_unix", w, 0),
            home=_field(d, "home", str, w, None),
            moved_from=_field(d, "moved_from", str, w, None),
            owner=_field(d, "owner", str, w, None),
            tasks=None if tasks is None else TaskStatus.from_wire(tasks),
        )


def format_job_id(job: int) -> str:
    """A job id as the `zorilla` tool shows it: 16 lowercase hex digits."""
    return f"{job:016x}"


def parse_job_id(text: str) -> int:
    """A job id from its 16 hex digits (as `zorilla` prints it)."""
    digits = text.strip().removeprefix("0x")
    if not (1 <= len(digits) <= 16) or any(c not in "0123456789abcdefABCDEF" for c in digits):
        raise ValueError(f"{text!r} is not a job id: job ids are 16 hex digits")
    return int(digits, 16)


# --- logs and outputs --------------------------------------------------------


@dataclass
class LogChunk:
    """One piece of a worker's stdout (or stderr, ``stderr`` true);
    ``rank`` is the worker's rank (a job array's: its task index)."""

    rank: int
    stderr: bool
    data: bytes

    @classmethod
    def from_wire(cls, value: Any) -> "LogChunk":
        d = _map(value, "log chunk")
        return cls(
            rank=_uint(d, "rank", "log chunk"),
            stderr=_field(d, "stderr", bool, "log chunk"),
            data=_field(d, "data", bytes, "log chunk"),
        )


@dataclass
class LogPage:
    """A page of a job's logs: ``next`` is the ``from`` of the following
    call; ``ended`` that the job is over and this page has its last
    chunks."""

    chunks: List[LogChunk]
    next: int
    ended: bool

    @classmethod
    def from_wire(cls, value: Any) -> "LogPage":
        d = _map(value, "logs")
        return cls(
            chunks=[LogChunk.from_wire(c) for c in _field(d, "chunks", list, "logs")],
            next=_uint(d, "next", "logs"),
            ended=_field(d, "ended", bool, "logs"),
        )


@dataclass
class OutputEntry:
    """An output file of a job: ``name`` is ``rank/path`` (the rank that
    wrote it, a job array's task index, and its path below ``/outputs``),
    ``size`` its size so far."""

    name: str
    size: int

    @property
    def rank(self) -> int:
        return int(self.name.split("/", 1)[0])

    @property
    def path(self) -> str:
        """Its path below the rank's ``/outputs``."""
        return self.name.split("/", 1)[1] if "/" in self.name else ""


@dataclass
class OutputPage:
    """A page of a job's output files, in name order; ``more``: ask again
    after the last name."""

    files: List[OutputEntry]
    more: bool

    @classmethod
    def from_wire(cls, value: Any) -> "OutputPage":
        d = _map(value, "outputs")
        files = []
        for f in _field(d, "files", list, "outputs"):
            f = _map(f, "outputs.files[]")
            files.append(OutputEntry(_field(f, "name", str, "output"), _uint(f, "size", "output")))
        return cls(files=files, more=_field(d, "more", bool, "outputs"))


@dataclass
class OutputData:
    """Bytes of an output file from the offset asked (none past its end),
    and the file's size now."""

    data: bytes
    size: int

    @classmethod
    def from_wire(cls, value: Any) -> "OutputData":
        d = _map(value, "output block")
        return cls(data=_field(d, "data", bytes, "output block"), size=_uint(d, "size", "output block"))


# --- nodes -------------------------------------------------------------------


@dataclass
class Welcome:
    """The node's answer to the hello: its protocol version, peer id, and a
    nonce fresh for the connection (signed submissions sign it)."""

    version: int
    peer: str
    nonce: bytes

    @classmethod
    def from_wire(cls, value: Any) -> "Welcome":
        d = _map(value, "welcome")
        return cls(
            version=_uint(d, "version", "welcome"),
            peer=_field(d, "peer", str, "welcome"),
            nonce=_field(d, "nonce", bytes, "welcome", b""),
        )


@dataclass
class GridInfo:
    """A closed grid: its key, the key's fingerprint, and when the node's
    credential expires (Unix seconds)."""

    key: str
    fingerprint: str
    expires_unix: int


@dataclass
class NodeInfo:
    """What a node is and has."""

    peer: str
    listen: List[str]
    cores: int
    memory_mib: int
    disk_mib: int
    running: Dict[int, List[int]]
    neighbours: int
    messages_sent: int
    version: str = ""
    network: str = ""
    uptime_secs: int = 0
    jobs: Dict[Phase, int] = field(default_factory=dict)
    disk_problem: Optional[str] = None
    peers_measured: int = 0
    grid: Optional[GridInfo] = None

    @classmethod
    def from_wire(cls, value: Any) -> "NodeInfo":
        d = _map(value, "node info")
        w = "node info"
        grid = d.get("grid")
        if grid is not None:
            g = _map(grid, "node info.grid")
            grid = GridInfo(
                key=_field(g, "key", str, "grid"),
                fingerprint=_field(g, "fingerprint", str, "grid"),
                expires_unix=_uint(g, "expires_unix", "grid"),
            )
        return cls(
            peer=_field(d, "peer", str, w),
            listen=[_expect(a, str, "listen[]") for a in _field(d, "listen", list, w, [])],
            cores=_uint(d, "cores", w, 0),
            memory_mib=_uint(d, "memory_mib", w, 0),
            disk_mib=_uint(d, "disk_mib", w, 0),
            running={
                _expect(j, int, "running key"): [
                    _expect(r, int, "running[]") for r in _expect(rs, list, "running[]")
                ]
                for j, rs in _field(d, "running", dict, w, {}).items()
            },
            neighbours=_uint(d, "neighbours", w, 0),
            messages_sent=_uint(d, "messages_sent", w, 0),
            version=_field(d, "version", str, w, ""),
            network=_field(d, "network", str, w, ""),
            uptime_secs=_uint(d, "uptime_secs", w, 0),
            jobs={
                _enum(Phase, p, "jobs key"): _expect(n, int, "jobs[]")
                for p, n in _field(d, "jobs", dict, w, {}).items()
            },
            disk_problem=_field(d, "disk_problem", str, w, None),
            peers_measured=_uint(d, "peers_measured", w, 0),
            grid=grid,
        )


@dataclass
class PeerEntry:
    """A peer a node knows: its id, measured RTT, whether it is a near or
    far neighbour, whether a connection is open, where it listens."""

    peer: str
    rtt_us: Optional[int]
    link: Optional[str]
    connected: bool
    addrs: List[str]

    @classmethod
    def from_wire(cls, value: Any) -> "PeerEntry":
        d = _map(value, "peer")
        return cls(
            peer=_field(d, "peer", str, "peer"),
            rtt_us=_field(d, "rtt_us", int, "peer", None),
            link=_field(d, "link", str, "peer", None),
            connected=_field(d, "connected", bool, "peer", False),
            addrs=[_expect(a, str, "peer.addrs[]") for a in _field(d, "addrs", list, "peer", [])],
        )
