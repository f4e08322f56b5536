"""The requests of the client protocol (docs/protocol.md, "Requests"), one
class each: its CBOR value (``to_wire``), the answer it expects and how
that is read (``read``), and whether it is about a job that only its
owner may ask (``job_of`` is then the job: the client sends it with the
owner's proof, :class:`Owner`).

A new request of the protocol is one more class here and one more method
of :class:`~zorilla.client.Client` that calls it (a new field of a job,
such as a job array's ``tasks``, is one more field of
:class:`~zorilla.messages.JobRequest` instead).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Dict, List, Optional

from .errors import ProtocolError
from .messages import (
    JobRequest,
    JobStatus,
    LogPage,
    NamedFile,
    NodeInfo as NodeInfoValue,
    OutputData,
    OutputPage,
    PeerEntry,
)

#: The longest a :class:`Logs` request waits for new chunks.
MAX_WAIT_SECS = 60
#: The most bytes one :class:`OutputBlock` asks for.
MAX_OUTPUT_BLOCK_BYTES = 4 * 1024 * 1024


class Request:
    """One request: ``variant`` is its name on the wire, ``answer`` the name
    of the response it expects."""

    variant: ClassVar[str]
    answer: ClassVar[str]
    #: Asked about a job as its owner (sent wrapped in :class:`Owner`).
    owners: ClassVar[bool] = False

    def body(self) -> Any:
        """The variant's data; ``None`` for a variant without (sent as its
        name alone)."""
        return None

    def to_wire(self) -> Any:
        body = self.body()
        return self.variant if body is None else {self.variant: body}

    def job_of(self) -> Optional[int]:
        """The job an owner's request is about (``None`` for the others)."""
        return getattr(self, "job", None) if self.owners else None

    def read(self, data: Any) -> Any:
        """The answer's data as this package's type."""
        return data


@dataclass
class Submit(Request):
    """Submit a job: this node becomes its home. ``owner`` is the user's
    signature (:func:`zorilla.user.UserKey.sign_submission`)."""

    variant: ClassVar[str] = "Submit"
    answer: ClassVar[str] = "Submitted"

    job: JobRequest
    module: bytes
    inputs: List[NamedFile] = field(default_factory=list)
    owner: Optional[Dict[str, Any]] = None

    def body(self) -> Any:
        return {
            "job": self.job.to_wire(),
            "module": bytes(self.module),
            "inputs": [f.to_wire() for f in self.inputs],
            "owner": self.owner,
        }

    def read(self, data: Any) -> int:
        job = data.get("job") if isinstance(data, dict) else None
        if not isinstance(job, int) or isinstance(job, bool) or job < 0:
            raise ProtocolError(f"Submitted carries no job id: {data!r:.80}")
        return job


@dataclass
class _OfJob(Request):
    """A request whose data is one job's id."""

    job: int

    def body(self) -> Any:
        return {"job": self.job}


class _AnsweredWithStatus(_OfJob):
    """A request about a job, answered with the job's status."""

    answer: ClassVar[str] = "Status"
    owners: ClassVar[bool] = True

    def read(self, data: Any) -> JobStatus:
        return JobStatus.from_wire(data)


def _list_of(data: Any, name: str, read: Any) -> List[Any]:
    """A list answer (``name`` on the wire), each item read by ``read``."""
    if not isinstance(data, list):
        raise ProtocolError(f"{name} is not a list: {data!r:.80}")
    return [read(item) for item in data]


@dataclass
class Status(_AnsweredWithStatus):
    """The status of a job."""

    variant: ClassVar[str] = "Status"


@dataclass
class ListJobs(Request):
    """Every job the node is home to."""

    variant: ClassVar[str] = "List"
    answer: ClassVar[str] = "Jobs"

    def read(self, data: Any) -> List[JobStatus]:
        return _list_of(data, "Jobs", JobStatus.from_wire)


@dataclass
class Cancel(_AnsweredWithStatus):
    """Cancel a job; answered with its status after the cancel."""

    variant: ClassVar[str] = "Cancel"


@dataclass
class Logs(Request):
    """A job's logs from chunk ``from_`` (``from`` on the wire) on, waiting
    up to ``wait_secs`` (at most 60) for new ones."""

    variant: ClassVar[str] = "Logs"
    answer: ClassVar[str] = "Logs"
    owners: ClassVar[bool] = True

    job: int
    from_: int = 0
    wait_secs: int = 0

    def body(self) -> Any:
        return {"job": self.job, "from": self.from_, "wait_secs": self.wait_secs}

    def read(self, data: Any) -> LogPage:
        return LogPage.from_wire(data)


@dataclass
class Outputs(Request):
    """A page of a job's output files, after name ``after`` ("" for the
    first page)."""

    variant: ClassVar[str] = "Outputs"
    answer: ClassVar[str] = "Outputs"
    owners: ClassVar[bool] = True

    job: int
    after: str = ""

    def body(self) -> Any:
        return {"job": self.job, "after": self.after}

    def read(self, data: Any) -> OutputPage:
        return OutputPage.from_wire(data)


@dataclass
class OutputBlock(Request):
    """Up to ``len`` bytes (at most 4 MiB) of output file ``name`` from
    ``offset``."""

    variant: ClassVar[str] = "OutputBlock"
    answer: ClassVar[str] = "OutputBlock"
    owners: ClassVar[bool] = True

    job: int
    name: str
    offset: int
    len: int = MAX_OUTPUT_BLOCK_BYTES

    def body(self) -> Any:
        return {"job": self.job, "name": self.name, "offset": self.offset, "len": self.len}

    def read(self, data: Any) -> OutputData:
        return OutputData.from_wire(data)


@dataclass
class Resize(_AnsweredWithStatus):
    """Change a malleable job's most workers."""

    variant: ClassVar[str] = "Resize"

    max_workers: int

    def body(self) -> Any:
        return {"job": self.job, "max_workers": self.max_workers}


@dataclass
class NodeInfo(Request):
    """What the node is and has."""

    variant: ClassVar[str] = "NodeInfo"
    answer: ClassVar[str] = "NodeInfo"

    def read(self, data: Any) -> NodeInfoValue:
        return NodeInfoValue.from_wire(data)


@dataclass
class Peers(Request):
    """The peers the node knows, nearest first."""

    variant: ClassVar[str] = "Peers"
    answer: ClassVar[str] = "Peers"

    def read(self, data: Any) -> List[PeerEntry]:
        return _list_of(data, "Peers", PeerEntry.from_wire)


@dataclass
class Challenge(_OfJob):
    """A nonce from the home of ``job`` for its owner's proofs."""

    variant: ClassVar[str] = "Challenge"
    answer: ClassVar[str] = "Challenge"

    def read(self, data: Any) -> bytes:
        nonce = data.get("nonce") if isinstance(data, dict) else None
        if not isinstance(nonce, bytes):
            raise ProtocolError(f"Challenge carries no nonce: {data!r:.80}")
        return nonce


@dataclass
class OwnerProof:
    """The proof that a job's owner asks a request: the home's nonce, a
    sequence number higher than any used with it before, and the owner's
    signature of ``["zorilla owner request 1", nonce, seq, request]``."""

    user: str
    nonce: bytes
    seq: int
    signature: bytes

    def to_wire(self) -> Dict[str, Any]:
        return {
            "user": self.user,
            "nonce": bytes(self.nonce),
            "seq": self.seq,
            "signature": bytes(self.signature),
        }


@dataclass
class Owner(Request):
    """``request`` asked as the owner of its job, with ``proof``."""

    variant: ClassVar[str] = "Owner"

    proof: OwnerProof
    request: Request

    @property
    def answer(self) -> str:  # type: ignore[override]
        return self.request.answer

    def body(self) -> Any:
        return {"proof": self.proof.to_wire(), "request": self.request.to_wire()}

    def read(self, data: Any) -> Any:
        return self.request.read(data)
