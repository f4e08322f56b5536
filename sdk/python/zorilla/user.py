"""Users: the ed25519 key a user signs with, its user id, and what the
user signs (docs/protocol.md, "Users and the jobs they own").

The key is kept where the `zorilla` tool keeps it, in the same format, so
that both act as the same user: ``$ZORILLA_USER_KEY``, else
``$XDG_CONFIG_HOME/zorilla/user.key``, else ``~/.config/zorilla/user.key``
(mode 0600 in a directory of mode 0700, made on first use). The file is a
libp2p private key in its protobuf encoding: field 1 the key type (1,
ed25519), field 2 the 64 bytes of the secret key and then the public key.

A user id is written like a libp2p peer id: base58 (Bitcoin's alphabet) of
the identity multihash (code 0, then the length) of the protobuf-encoded
public key (field 1 the type 1, field 2 the 32 bytes of the key), so
``12D3KooW...``. Signatures are ed25519 (the ``cryptography`` package)
over the CBOR of a tuple, as the node encodes it.
"""

from __future__ import annotations

import hashlib
import itertools
import os
from pathlib import Path
from typing import Iterable, List, Optional, Sequence, Tuple

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from . import wire
from .errors import UserKeyError
from .messages import JobRequest, NamedFile
from .requests import OwnerProof, Request

#: The protobuf key type of ed25519 keys in libp2p.
_ED25519 = 1
#: The largest key file read (one is 68 bytes).
_MAX_KEY_FILE = 4096
_BASE58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"


# --- user ids ------------------------------------------------------------------


def b58encode(data: bytes) -> str:
    """Base58 with Bitcoin's alphabet (as peer ids are written)."""
    n = int.from_bytes(data, "big")
    out = []
    while n:
        n, r = divmod(n, 58)
        out.append(_BASE58[r])
    zeros = len(data) - len(data.lstrip(b"\0"))
    return "1" * zeros + "".join(reversed(out))


def b58decode(text: str) -> bytes:
    """The bytes of a base58 text; ``ValueError`` if it is not one."""
    n = 0
    for c in text:
        i = _BASE58.find(c)
        if i < 0:
            raise ValueError(f"{c!r} is not a base58 digit")
        n = n * 58 + i
    zeros = len(text) - len(text.lstrip("1"))
    body = n.to_bytes((n.bit_length() + 7) // 8, "big") if n else b""
    return b"\0" * zeros + body


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _protobuf_key(data: bytes) -> bytes:
    """A libp2p key message: type ed25519, then ``data``."""
    return b"\x08" + _varint(_ED25519) + b"\x12" + _varint(len(data)) + data


def _protobuf_fields(data: bytes) -> dict:
    """The varint and bytes fields of a protobuf message, by number (the
    last of each wins, as protobuf says); ``ValueError`` if malformed."""
    fields = {}
    i = 0

    def varint() -> int:
        nonlocal i
        value = shift = 0
        while True:
            if i >= len(data) or shift > 63:
                raise ValueError("a varint runs past the end")
            b = data[i]
            i += 1
            value |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return value

    while i < len(data):
        tag = varint()
        number, wire_type = tag >> 3, tag & 7
        if wire_type == 0:
            fields[number] = varint()
        elif wire_type == 2:
            length = varint()
            if i + length > len(data):
                raise ValueError("a field runs past the end")
            fields[number] = data[i : i + length]
            i += length
        else:
            raise ValueError(f"field {number} has wire type {wire_type}, not one a key has")
    return fields


def user_id(public_key: bytes) -> str:
    """The user id of the ed25519 public key ``public_key`` (32 bytes)."""
    if len(public_key) != 32:
        raise ValueError("an ed25519 public key is 32 bytes")
    encoded = _protobuf_key(public_key)
    # The identity multihash: code 0, the length, the bytes themselves
    # (libp2p inlines keys of up to 42 bytes; this one is 36).
    return b58encode(b"\x00" + _varint(len(encoded)) + encoded)


def public_key_of(user: str) -> bytes:
    """The ed25519 public key a user id names; ``ValueError`` if ``user``
    is not a user id."""
    try:
        raw = b58decode(user)
    except ValueError as e:
        raise ValueError(f"{user!r:.80} is not a user id: {e}") from None
    if len(raw) < 2 or raw[0] != 0 or raw[1] != len(raw) - 2:
        raise ValueError(f"{user!r:.80} is not a user id (not an identity multihash)")
    fields = _protobuf_fields(raw[2:])
    key = fields.get(2)
    if fields.get(1, 0) != _ED25519 or not isinstance(key, bytes) or len(key) != 32:
        raise ValueError(f"{user!r:.80} is not a user id (not an ed25519 key)")
    return key


def verify(user: str, message: bytes, signature: bytes) -> bool:
    """Whether ``signature`` is ``user``'s of ``message``."""
    try:
        Ed25519PublicKey.from_public_bytes(public_key_of(user)).verify(signature, message)
        return True
    except (ValueError, InvalidSignature):
        return False


# --- what users sign -----------------------------------------------------------


def _sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def submit_message(
    nonce: bytes, job: JobRequest, module_sha256: str, inputs: Sequence[Tuple[str, str]]
) -> bytes:
    """What a signed submission signs: the CBOR of ``["zorilla submit 1",
    nonce, job, module_sha256, [[name, sha256], ...]]``. The node encodes
    the nonce, a Rust byte slice, as an array of its byte values (not a
    byte string), and the job with every field."""
    return wire.encode(
        ["zorilla submit 1", list(nonce), job.to_wire(), module_sha256, [[n, h] for n, h in inputs]]
    )


def owner_message(nonce: bytes, seq: int, request: Request) -> bytes:
    """What an owner's proof signs: the CBOR of ``["zorilla owner request
    1", nonce, seq, request]`` (the nonce as an array of byte values)."""
    return wire.encode(["zorilla owner request 1", list(nonce), seq, request.to_wire()])


# --- the key -------------------------------------------------------------------


def default_key_path() -> Path:
    """Where the `zorilla` tool keeps the user's key."""
    env = lambda name: os.environ.get(name) or None  # noqa: E731
    if env("ZORILLA_USER_KEY"):
        return Path(env("ZORILLA_USER_KEY"))
    config = env("XDG_CONFIG_HOME")
    if config is None:
        home = env("HOME")
        if home is None:
            raise UserKeyError(
                "no place for the user key: set ZORILLA_USER_KEY (a file) or HOME or XDG_CONFIG_HOME"
            )
        config = os.path.join(home, ".config")
    return Path(config) / "zorilla" / "user.key"


_attempts = itertools.count()


class UserKey:
    """A user's ed25519 key pair."""

    def __init__(self, private_key: Ed25519PrivateKey):
        self._key = private_key
        self.public_key: bytes = private_key.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
        #: The user id (as `zorilla whoami` prints it).
        self.id: str = user_id(self.public_key)

    def __repr__(self) -> str:
        return f"UserKey({self.id})"

    @classmethod
    def generate(cls) -> "UserKey":
        """A new key."""
        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def from_bytes(cls, data: bytes, where: str = "the key") -> "UserKey":
        """The key a key file's bytes hold."""

        def corrupt(reason: str) -> UserKeyError:
            return UserKeyError(f"user key {where} does not hold an ed25519 key: {reason}")

        try:
            fields = _protobuf_fields(data)
        except ValueError as e:
            raise corrupt(str(e)) from None
        if fields.get(1, 0) != _ED25519:
            raise corrupt("not an ed25519 key")
        pair = fields.get(2)
        if not isinstance(pair, bytes) or len(pair) != 64:
            raise corrupt("its key is not 64 bytes (the secret key, then the public key)")
        key = cls(Ed25519PrivateKey.from_private_bytes(pair[:32]))
        if key.public_key != pair[32:]:
            raise corrupt("its public key is not the secret key's")
        return key

    def to_bytes(self) -> bytes:
        """The key as its file holds it."""
        secret = self._key.private_bytes(
            serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
        )
        return _protobuf_key(secret + self.public_key)

    @classmethod
    def load(cls, path: Optional[os.PathLike] = None) -> "UserKey":
        """The key in ``path`` (default: :func:`default_key_path`)."""
        path = Path(path) if path is not None else default_key_path()
        try:
            with open(path, "rb") as f:
                data = f.read(_MAX_KEY_FILE + 1)
        except OSError as e:
            raise UserKeyError(f"user key {path}: {e}") from e
        if len(data) > _MAX_KEY_FILE:
            raise UserKeyError(f"user key {path} does not hold an ed25519 key: the file is too large")
        return cls.from_bytes(data, str(path))

    @classmethod
    def load_or_create(cls, path: Optional[os.PathLike] = None) -> "UserKey":
        """The key in ``path`` (default: :func:`default_key_path`), made
        there if there is none, as the `zorilla` tool does: the directory
        mode 0700, the file mode 0600, written whole under another name and
        then linked into place, so that a reader never sees half a key and
        two processes making one at once end up with the same key."""
        path = Path(path) if path is not None else default_key_path()
        if path.exists():
            return cls.load(path)
        try:
            if path.parent != Path(""):
                os.makedirs(path.parent, mode=0o700, exist_ok=True)
            key = cls.generate()
            tmp = path.with_name(f"{path.name}.{os.getpid()}.{next(_attempts)}.py.new")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                try:
                    os.write(fd, key.to_bytes())
                    os.fsync(fd)
                finally:
                    os.close(fd)
                os.link(tmp, path)
            finally:
                try:
                    os.unlink(tmp)
                except FileNotFoundError:
                    pass
        except FileExistsError:
            # Another process made it meanwhile: that one is the user's.
            return cls.load(path)
        except OSError as e:
            raise UserKeyError(f"user key {path}: {e}") from e
        return key

    def sign(self, message: bytes) -> bytes:
        """The user's signature of ``message``."""
        return self._key.sign(message)

    def sign_submission(
        self, nonce: bytes, job: JobRequest, module: bytes, inputs: Iterable[NamedFile]
    ) -> dict:
        """The ``owner`` of a Submit: this user's id and signature of the
        job, the module and the inputs, on the connection of ``nonce``."""
        hashes: List[Tuple[str, str]] = [(f.name, _sha256_hex(f.data)) for f in inputs]
        message = submit_message(nonce, job, _sha256_hex(module), hashes)
        return {"user": self.id, "signature": self.sign(message)}

    def prove(self, nonce: bytes, seq: int, request: Request) -> OwnerProof:
        """The proof that this user asks ``request`` with the home's
        ``nonce`` and sequence number ``seq``."""
        return OwnerProof(self.id, bytes(nonce), seq, self.sign(owner_message(nonce, seq, request)))
