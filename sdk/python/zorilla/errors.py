"""What can go wrong talking to a node, one exception class per cause.

Every error the node answers with (`{"Error": {"kind": ..., "message":
...}}` in docs/protocol.md) raises the subclass of :class:`NodeError` named
after its kind; its ``message`` is the node's sentence. Everything else
that fails on the client's side (the connection, an answer that is not the
protocol's, the user's key file) has a class of its own. All derive from
:class:`ZorillaError`, so ``except ZorillaError`` catches every failure of
this package.
"""

from __future__ import annotations

from typing import Dict, Type


class ZorillaError(Exception):
    """Any failure of a call of this package."""


class ConnectionFailed(ZorillaError):
    """The node could not be reached, or the connection broke or timed out."""


class ConnectionClosed(ConnectionFailed):
    """The node closed the connection (after a refused hello, a frame over
    its cap, or a timeout of its own)."""


class ProtocolError(ZorillaError):
    """The node sent something the protocol does not allow: a frame over
    the cap, bytes that are not CBOR, or an answer of the wrong shape. The
    connection cannot be trusted after it and is closed."""


class UserKeyError(ZorillaError):
    """The user's key file could not be read, made, or does not hold an
    ed25519 key as the `zorilla` tool writes it."""


class NodeError(ZorillaError):
    """The node refused a request: ``kind`` is the protocol's error kind,
    ``message`` the node's one sentence saying what was wrong."""

    kind = "?"

    def __init__(self, message: str, kind: str | None = None):
        super().__init__(message)
        self.message = message
        if kind is not None:
            self.kind = kind

    def __str__(self) -> str:
        return f"{self.kind}: {self.message}"


class BadRequestError(NodeError):
    """``BadRequest``: the request, job or module is invalid (a value out of
    its range, a malformed frame, a job that cannot run)."""

    kind = "BadRequest"


class NotFoundError(NodeError):
    """``NotFound``: no node asked knows the job."""

    kind = "NotFound"


class VersionError(NodeError):
    """``Version``: the node speaks another version of the protocol."""

    kind = "Version"


class UnauthorizedError(NodeError):
    """``Unauthorized``: a missing or wrong token, a signature that does not
    hold, or a request about a job that is another user's."""

    kind = "Unauthorized"


class BusyError(NodeError):
    """``Busy``: too many clients at once, or the node takes no jobs now
    (its disk cannot be written); try again later."""

    kind = "Busy"


class InternalError(NodeError):
    """``Internal``: the node failed to do it."""

    kind = "Internal"


class UnreachableError(NodeError):
    """``Unreachable``: the job's home, asked on the client's behalf, did
    not answer; try again (perhaps through another node)."""

    kind = "Unreachable"


class StaleError(NodeError):
    """``Stale``: the nonce of an owner's proof is unknown at the job's home
    or expired. The client asks for a new one and tries once more by
    itself, so this reaches a caller only if that fails too."""

    kind = "Stale"


#: The exception class of each error kind of the protocol.
ERRORS: Dict[str, Type[NodeError]] = {
    cls.kind: cls
    for cls in (
        BadRequestError,
        NotFoundError,
        VersionError,
        UnauthorizedError,
        BusyError,
        InternalError,
        UnreachableError,
        StaleError,
    )
}


def node_error(kind: str, message: str) -> NodeError:
    """The exception for the node's error of ``kind`` (a kind newer than
    this package gets a plain :class:`NodeError` carrying it)."""
    cls = ERRORS.get(kind)
    if cls is None:
        return NodeError(message, kind=kind)
    return cls(message)
