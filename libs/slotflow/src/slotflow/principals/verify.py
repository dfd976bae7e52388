"""Is this command's principal proven? The check every command consumer makes before applying one.

With signatures required, a command is applied only when all of these hold, checked in this
order, and otherwise rejected with the first that fails as its reason:

1. it carries a proof (a signature);
2. the proof names a key the api registered (the keys topic);
3. the signature verifies over the command's canonical bytes for the topic it was read from;
4. the key is not revoked;
5. the command's principal is the key's own (only the api's key names others: its callers);
6. the key's scope grants the command's (`slotflow.contracts.scopes.COMMAND_SCOPES`);
7. it was signed within the replay window before the database's `now()`, and not further ahead
   of it than the allowed skew.

With signatures optional nothing is checked: the principal is whatever the command says.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta

from slotflow.contracts.envelope import Envelope
from slotflow.contracts.scopes import grants, scope_needed
from slotflow.errors import PermanentError
from slotflow.principals.keyring import KeyRing
from slotflow.principals.settings import SignatureSettings
from slotflow.principals.signing import canonical_bytes, signature_matches


class UnprovenCommand(PermanentError):
    """The command's principal is not proven (or lacks the scope); the message says why, and is
    the reason of its CommandRejected."""


@dataclass(frozen=True, slots=True)
class Proven:
    """Who a command is from. ``key_id`` is None when nothing was checked (signatures optional)."""

    principal: str | None
    key_id: str | None = None


def _at(value: datetime) -> str:
    return value.isoformat(timespec="seconds")


class CommandVerifier:
    """Checks commands against the keys of ``keyring`` (unused when signatures are optional)."""

    def __init__(self, settings: SignatureSettings, keyring: KeyRing | None = None) -> None:
        self._settings = settings
        self._keyring = keyring if keyring is not None else KeyRing()
        self._max_age = timedelta(seconds=settings.command_max_age_seconds)
        self._skew = timedelta(seconds=settings.command_max_skew_seconds)

    @property
    def required(self) -> bool:
        return self._settings.required

    async def refresh(self) -> None:
        """Catch the keys up with the topic before a batch of commands is verified.

        Raises:
            TransientStorageError: the keys could not be read; wait and verify again.
        """
        if self.required:
            await self._keyring.refresh()

    def verify(self, envelope: Envelope, *, topic: str, now: datetime) -> Proven:
        """Who ``envelope`` (a command read from ``topic``) is proven to be from, as of ``now``
        (the database's clock).

        Raises:
            UnprovenCommand: signatures are required and one of the checks (module docstring)
                failed; its message is the reason.
        """
        if not self.required:
            return Proven(envelope.principal)
        proof = envelope.proof
        if proof is None:
            raise UnprovenCommand(
                "unsigned: this deployment accepts only signed commands (SLOTFLOW_COMMAND_SIGNATURES="
                "required); send it through the api, or sign it with a registered key (docs/security.md)"
            )
        key = self._keyring.get(proof.key_id)
        if key is None:
            raise UnprovenCommand(
                f"signed with key {proof.key_id[:100]!r}, which no principal has registered "
                "(`slotflow key list` shows the keys)"
            )
        try:
            signed = canonical_bytes(envelope, topic=topic, key_id=proof.key_id, signed_at=proof.signed_at)
        except ValueError:
            signed = b""
        if not signed or not signature_matches(key.public_key, proof.signature, signed):
            raise UnprovenCommand(
                f"the signature does not match the command for key {key.key_id} of {key.principal}: "
                "forged, or changed after it was signed"
            )
        if key.revoked_at is not None:
            raise UnprovenCommand(
                f"signed with key {key.key_id} of {key.principal}, revoked at {_at(key.revoked_at)}"
                + (f" by {key.revoked_by}" if key.revoked_by else "")
            )
        if not key.acts_for_others and envelope.principal != key.principal:
            raise UnprovenCommand(
                f"key {key.key_id} belongs to {key.principal}, not to {envelope.principal!s:.300}: "
                "a key proves only its own principal"
            )
        needed = scope_needed(envelope.type)
        if not grants(key.scope, needed):
            raise UnprovenCommand(
                f"{key.principal} holds the {key.scope!r} scope; {envelope.type} needs {needed!r}"
            )
        if proof.signed_at < now - self._max_age:
            raise UnprovenCommand(
                f"signed at {_at(proof.signed_at)}, more than {self._settings.command_max_age_seconds:g} s "
                f"before the database's clock ({_at(now)}): outside the replay window; sign it again "
                "(with a new command id) if it is still wanted"
            )
        if proof.signed_at > now + self._skew:
            raise UnprovenCommand(
                f"signed at {_at(proof.signed_at)}, more than {self._settings.command_max_skew_seconds:g} s "
                f"after the database's clock ({_at(now)}): the signer's clock is ahead"
            )
        return Proven(envelope.principal, key.key_id)
