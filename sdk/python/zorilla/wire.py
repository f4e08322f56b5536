"""Frames of the client protocol: a 4-byte big-endian length, then that
many bytes of CBOR encoding one value (docs/protocol.md, "Transport").

What is read is bounded: a frame announcing more than the cap
(:data:`MAX_FRAME`, the node's own, 64 MiB) is refused as soon as its four
length bytes are in, before any of it is read, and the bytes of a frame
are read as they arrive, never into a buffer sized by the announcement
alone.
"""

from __future__ import annotations

import io
import socket
import struct
from typing import Any

import cbor2

from .errors import ConnectionClosed, ConnectionFailed, ProtocolError

#: The largest frame sent or read: the node's cap after the hello.
MAX_FRAME = 64 * 1024 * 1024
#: The largest hello frame the node reads.
HELLO_MAX_FRAME = 4 * 1024
#: How much of a frame is read at a time.
_CHUNK = 1024 * 1024
#: What cbor2 before 5.5 returns for a lone break code (later ones raise).
_BREAK = getattr(cbor2, "break_marker", object())


def encode(value: Any) -> bytes:
    """The CBOR of ``value`` as the node's serde encoding writes it: maps in
    the order given (the fields' order in the Rust types, which is what
    signatures cover), integers in their shortest form, definite
    lengths."""
    return cbor2.dumps(value)


def frame(value: Any, max_frame: int = MAX_FRAME) -> bytes:
    """``value`` as one frame, refused if over ``max_frame``."""
    body = encode(value)
    if len(body) > max_frame:
        raise ProtocolError(
            f"a frame of {len(body)} bytes is over the cap of {max_frame} bytes "
            "(a module and its inputs must fit in 64 MiB)"
        )
    return struct.pack(">I", len(body)) + body


def send(sock: socket.socket, value: Any, max_frame: int = MAX_FRAME) -> None:
    """Writes ``value`` as one frame."""
    send_frame(sock, frame(value, max_frame))


def send_frame(sock: socket.socket, data: bytes) -> None:
    """Writes a frame made by :func:`frame`."""
    try:
        sock.sendall(data)
    except OSError as e:
        raise ConnectionFailed(f"cannot send to the node: {e}") from e


def _read_exactly(sock: socket.socket, n: int, what: str) -> bytes:
    parts = []
    left = n
    while left > 0:
        try:
            part = sock.recv(min(left, _CHUNK))
        except socket.timeout as e:
            raise ConnectionFailed(f"the node sent no {what} in time") from e
        except OSError as e:
            raise ConnectionFailed(f"cannot read from the node: {e}") from e
        if not part:
            raise ConnectionClosed(
                "the node closed the connection"
                + ("" if left == n else f" in the middle of a {what}")
            )
        parts.append(part)
        left -= len(part)
    return b"".join(parts)


def receive(sock: socket.socket, max_frame: int = MAX_FRAME) -> Any:
    """Reads one frame and decodes its CBOR."""
    head = _read_exactly(sock, 4, "frame")
    (length,) = struct.unpack(">I", head)
    if length > max_frame:
        raise ProtocolError(
            f"the node announced a frame of {length} bytes, over the cap of {max_frame}"
        )
    return decode(_read_exactly(sock, length, "frame"))


def decode(body: bytes) -> Any:
    """The one CBOR value that is the whole of ``body``."""
    fp = io.BytesIO(body)
    try:
        value = cbor2.CBORDecoder(fp).decode()
    except (cbor2.CBORDecodeError, ValueError, TypeError, OverflowError, RecursionError) as e:
        raise ProtocolError(f"the node sent a frame that is not CBOR: {e}") from e
    if fp.tell() != len(body):
        raise ProtocolError(f"the node sent a frame with {len(body) - fp.tell()} bytes after its value")
    if value is _BREAK:
        raise ProtocolError("the node sent a frame that is not CBOR (a break where a value should be)")
    return value
