"""Signing a command with a principal's key, and the bytes that are signed.

A command's principal is proven by an Ed25519 signature made with the private half of a key
registered for that principal (`slotflow key create`, `POST /v1/keys`). The signature covers the
command's canonical bytes: a fixed context string, then one JSON object (keys sorted, no spaces,
ASCII only) holding the topic the command is written to, every envelope field but the proof
itself, and the proof's key id and signing time. So nothing a reader acts on can be changed
without the signature failing: not the data, not the principal, not the command id the inbox
deduplicates on, not the topic (a command signed for one deployment's namespace does not verify
on another's), not when it was signed (the replay window).

The bytes are computed from the decoded envelope, not from the record's bytes: JSON has many
spellings of one value (escapes, spacing, key order, `1e3` and `1000.0`), and the reader acts on
the decoded values, so those are what is signed.
"""

import base64
import binascii
import hashlib
import json
import os
import re
import stat
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from slotflow.contracts.envelope import CommandProof, Envelope
from slotflow.errors import ConfigurationError

#: Prefixed to the canonical JSON: a signature made for anything else never verifies as a command's.
SIGNATURE_CONTEXT = b"slotflow command signature v1\n"
#: `k_` and the first 32 hex digits of the SHA-256 of the raw public key.
KEY_ID_PATTERN = r"^k_[0-9a-f]{32}$"
_KEY_ID = re.compile(KEY_ID_PATTERN)
_PUBLIC_KEY_BYTES = 32
_SIGNATURE_BYTES = 64


class KeyFileError(ConfigurationError):
    """A signing key file is missing, unreadable, or not an Ed25519 private key."""


class MalformedKey(ConfigurationError):
    """A public key is not 32 bytes of base64url (an Ed25519 public key)."""


def _instant(value: datetime) -> str:
    # One spelling per instant: UTC, microseconds always written.
    return value.astimezone(UTC).isoformat(timespec="microseconds")


def canonical_bytes(envelope: Envelope, *, topic: str, key_id: str, signed_at: datetime) -> bytes:
    """What a command's signature covers (see the module docstring).

    Raises:
        ValueError: the envelope's data holds a value JSON cannot carry (NaN, infinity).
    """
    body: dict[str, Any] = {
        "topic": topic,
        "type": envelope.type,
        "version": envelope.version,
        "id": envelope.id,
        "key": envelope.key,
        "source": envelope.source,
        "occurred_at": _instant(envelope.occurred_at),
        "principal": envelope.principal,
        "key_id": key_id,
        "signed_at": _instant(signed_at),
        "data": envelope.data,
    }
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    return SIGNATURE_CONTEXT + text.encode("ascii")


def encode_public_key(key: Ed25519PublicKey) -> str:
    """The public key as registered and distributed: its 32 raw bytes, base64url without padding."""
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _b64decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def decode_public_key(text: str) -> Ed25519PublicKey:
    """The Ed25519 public key ``text`` (base64url of 32 raw bytes) encodes.

    Raises:
        MalformedKey: it is not one.
    """
    try:
        raw = _b64decode(text.strip())
    except (binascii.Error, ValueError) as err:
        raise MalformedKey(f"the public key is not base64url: {err}") from None
    if len(raw) != _PUBLIC_KEY_BYTES:
        raise MalformedKey(
            f"the public key is {len(raw)} bytes; an Ed25519 public key is {_PUBLIC_KEY_BYTES} "
            "(`slotflow key create` makes one)"
        )
    return Ed25519PublicKey.from_public_bytes(raw)


def key_id_of(public_key: Ed25519PublicKey | str) -> str:
    """The key's id, derived from its public half: the same key always has the same id, so a key
    once revoked cannot come back under a fresh id by being registered again."""
    key = decode_public_key(public_key) if isinstance(public_key, str) else public_key
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return "k_" + hashlib.sha256(raw).hexdigest()[:32]


def is_key_id(value: str) -> bool:
    return bool(_KEY_ID.match(value))


def signature_matches(public_key: str, signature: str, message: bytes) -> bool:
    """Whether ``signature`` (base64url) is the Ed25519 signature of ``message`` by ``public_key``.
    Anything malformed is simply not a match."""
    try:
        raw = _b64decode(signature)
        if len(raw) != _SIGNATURE_BYTES:
            return False
        decode_public_key(public_key).verify(raw, message)
    except (InvalidSignature, MalformedKey, binascii.Error, ValueError):
        return False
    return True


def private_key_pem(key: Ed25519PrivateKey) -> bytes:
    """``key`` as an unencrypted PKCS#8 PEM (what `slotflow key create` writes, mode 0600)."""
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def write_private_key(path: Path, key: Ed25519PrivateKey) -> None:
    """Write ``key`` to a new file at ``path`` readable by its owner only.

    Raises:
        KeyFileError: the file exists already (a key is never overwritten) or cannot be written.
    """
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, stat.S_IRUSR | stat.S_IWUSR)
    except FileExistsError:
        raise KeyFileError(f"{path} exists already; a signing key is never overwritten") from None
    except OSError as err:
        raise KeyFileError(f"cannot write the signing key to {path}: {err}") from None
    with os.fdopen(fd, "wb") as out:
        out.write(private_key_pem(key))


def load_private_key(path: Path) -> Ed25519PrivateKey:
    """The Ed25519 private key in the PEM file at ``path``.

    Raises:
        KeyFileError: missing, unreadable, or not an unencrypted Ed25519 private key.
    """
    try:
        data = path.read_bytes()
    except OSError as err:
        raise KeyFileError(f"cannot read the signing key {path}: {err}") from None
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as err:
        raise KeyFileError(f"{path} is not an unencrypted PEM private key: {err}") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise KeyFileError(f"{path} holds a {type(key).__name__}; slotflow signs with Ed25519 keys")
    return key


@dataclass(frozen=True)
class Signer:
    """Signs commands with one registered key.

    ``principal`` is the principal the key is registered for (`key:alice`). A signer that
    ``acts_for_others`` (the api's own, and only it: it authenticated the caller) keeps the
    principal an envelope names (`token:oncall`) and vouches for it; any other signer writes its
    own principal into every envelope it signs.
    """

    private_key: Ed25519PrivateKey
    principal: str
    acts_for_others: bool = False

    @property
    def key_id(self) -> str:
        return key_id_of(self.private_key.public_key())

    @property
    def public_key(self) -> str:
        return encode_public_key(self.private_key.public_key())

    def sign(self, envelope: Envelope, *, topic: str, signed_at: datetime | None = None) -> Envelope:
        """``envelope`` with its principal set (see the class) and its proof, for ``topic`` (the
        full name, namespace included). ``signed_at`` defaults to this host's clock."""
        principal = envelope.principal if self.acts_for_others and envelope.principal else self.principal
        named = envelope.model_copy(update={"principal": principal, "proof": None})
        at = signed_at or datetime.now(UTC)
        key_id = self.key_id
        signature = self.private_key.sign(canonical_bytes(named, topic=topic, key_id=key_id, signed_at=at))
        proof = CommandProof(
            key_id=key_id,
            signed_at=at,
            signature=base64.urlsafe_b64encode(signature).rstrip(b"=").decode("ascii"),
        )
        return named.model_copy(update={"proof": proof})


def load_signer(path: Path, principal: str) -> Signer:
    """The signer of the key in ``path``, registered for ``principal``.

    Raises:
        KeyFileError: the file is not a usable key.
    """
    return Signer(load_private_key(path), principal)
