"""A Python client of Zorilla's client protocol (docs/protocol.md): submit
jobs signed with your user key, follow them, fetch their outputs, cancel
them, and ask a node what it is.

- :mod:`zorilla.client`: :class:`Client`, a connection to a node.
- :mod:`zorilla.messages`: the protocol's values as dataclasses
  (:class:`JobRequest`, :class:`JobStatus`, a job array's :class:`Tasks`
  and :class:`TaskStatus`, ...).
- :mod:`zorilla.requests`: the protocol's requests, one class each.
- :mod:`zorilla.user`: the user's key (shared with the `zorilla` tool),
  user ids, and what a user signs.
- :mod:`zorilla.wire`: length-prefixed CBOR frames, bounded.
- :mod:`zorilla.errors`: one exception per error kind of the node.
"""

from .client import PROTOCOL_VERSION, TASK_ARGS_FILE, Client, local_node_address
from .errors import (
    BadRequestError,
    BusyError,
    ConnectionClosed,
    ConnectionFailed,
    InternalError,
    NodeError,
    NotFoundError,
    ProtocolError,
    StaleError,
    UnauthorizedError,
    UnreachableError,
    UserKeyError,
    VersionError,
    ZorillaError,
)
from .messages import (
    Arch,
    JobRequest,
    JobStatus,
    Kind,
    LogChunk,
    LogPage,
    NamedFile,
    NodeInfo,
    OnWorkerLost,
    OutcomeCode,
    OutputData,
    OutputEntry,
    OutputPage,
    Pending,
    PeerEntry,
    Phase,
    RankStatus,
    Strategy,
    Tasks,
    TaskStatus,
    Welcome,
    format_job_id,
    parse_job_id,
)
from .user import UserKey, default_key_path, user_id

__version__ = "0.1.0"

__all__ = [
    "PROTOCOL_VERSION", "TASK_ARGS_FILE", "Client", "local_node_address",
    "ZorillaError", "ConnectionFailed", "ConnectionClosed", "ProtocolError", "UserKeyError",
    "NodeError", "BadRequestError", "NotFoundError", "VersionError", "UnauthorizedError",
    "BusyError", "InternalError", "UnreachableError", "StaleError",
    "Arch", "JobRequest", "JobStatus", "Kind", "LogChunk", "LogPage", "NamedFile", "NodeInfo",
    "OnWorkerLost", "OutcomeCode", "OutputData", "OutputEntry", "OutputPage", "Pending",
    "PeerEntry", "Phase", "RankStatus", "Strategy", "Tasks", "TaskStatus", "Welcome",
    "format_job_id", "parse_job_id",
    "UserKey", "default_key_path", "user_id",
]
