"""The JSON envelope every slotflow record carries, and the Message base for its `data`.

Wire rules: within a version only additive changes (new optional fields); anything else is a new
version. Consumers ignore unknown fields (tolerant reader), so producers can add fields first.
Trace context travels in Kafka headers (`traceparent`), never inside the envelope.
"""

import hashlib
from datetime import datetime
from typing import Annotated, Any, ClassVar, Self

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    model_validator,
)

from slotflow.contracts.acceptance import (
    ID_CONTROL,
    ID_MAX_BYTES,
    INT4_MAX,
    INT8_MAX,
    STORED_KEY,
    id_refusal,
    text_refusal,
    within_id_bytes,
)
from slotflow.contracts.acceptance import check as check_acceptable
from slotflow.core.nul import REPLACEMENT, storable

TRACEPARENT_HEADER = "traceparent"
TYPE_HEADER = "slotflow-type"
VERSION_HEADER = "slotflow-version"
REDRIVE_COUNT_HEADER = "slotflow-redrive-count"

#: Identifiers users choose (schedule ids, workflow ids, handler names): printable, bounded.
IDENTIFIER_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,199}$"
#: Schedule ids are one URL path segment (`/v1/schedules/{id}/pause`): the identifier pattern
#: without `/`. `team/a` used to be created and then could not be read, paused or deleted over
#: HTTP (issue 23); it is now refused everywhere with the same rule.
SCHEDULE_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:@+-]{0,199}$"
#: The envelope's `id` and `key` are at most this many characters, and at most
#: `acceptance.ID_MAX_BYTES` UTF-8 bytes (both are index keys).
ID_MAX_CHARS = 1000
KEY_MAX_CHARS = 1000
#: An identifier that fits every index it keys (`acceptance.ID_MAX_BYTES`): an envelope id, a run,
#: timer, command or dead letter id.
IdText = Annotated[str, Field(min_length=1, max_length=ID_MAX_CHARS), AfterValidator(within_id_bytes)]
#: Integers some service stores in an `integer` or a `bigint` column. A field with a bound of its
#: own (`ge=1`) writes `Field(ge=1, le=acceptance.INT4_MAX)` instead: a bound in the Annotated
#: metadata would override the field's.
Int4 = Annotated[int, Field(ge=-(2**31), le=INT4_MAX)]
Int8 = Annotated[int, Field(ge=-(2**63), le=INT8_MAX)]
#: Text some consumer keys an index with (a reason, a topic, a job id): `acceptance.ID_MAX_BYTES`.
IndexedText = Annotated[str, AfterValidator(within_id_bytes)]
#: The envelope's optional `principal` (who issued a command) is at most this many characters.
PRINCIPAL_MAX_CHARS = 300
#: A command proof's key id and signature are at most this many characters (a key id is
#: `k_` and 32 hex digits, a signature 86 base64url characters; the verifier says what is wrong
#: with a longer or malformed one, rather than the envelope failing to decode).
PROOF_FIELD_MAX_CHARS = 200
#: Hex digits of the digest that stands in for the part of an id cut off to fit.
_DIGEST_CHARS = 16


def fit_id(base: str, suffix: str = "", *, limit: int = ID_MAX_CHARS) -> str:
    """``base + suffix`` when that is storable and within ``limit`` characters (and
    `acceptance.ID_MAX_BYTES` bytes), else a cut of ``base`` with a digest of the whole (so two
    long bases still get two ids), then ``suffix``.

    Deterministic: an event derived twice from one command (a redelivery) gets one id, so its
    duplicates still collapse. Derived event ids (`{command id}/rejected`, `{run id}/skipped`)
    go through here because the id they derive from may already be at the limit.
    """
    # Storable, and without the control characters every consumer refuses in an id (a rejection
    # echoing a command id with a newline in it would be refused by everyone it was meant for).
    clean = ID_CONTROL.sub(REPLACEMENT, storable(base))
    whole = base + suffix
    if clean == base and len(whole) <= limit and id_refusal(whole, "id") is None:
        return whole
    digest = hashlib.sha256(base.encode("utf-8", errors="surrogatepass")).hexdigest()[:_DIGEST_CHARS]
    # Suffixes are short names of ours ("/rejected"), so there is always room for some of base.
    room = max(limit - len(suffix) - _DIGEST_CHARS - 1, 0)
    room_bytes = max(ID_MAX_BYTES - len(suffix.encode()) - _DIGEST_CHARS - 1, 0)
    # `storable` left no NUL and no lone surrogate; a cut inside a character drops the character.
    cut = clean[:room].encode()[:room_bytes].decode("utf-8", errors="ignore")
    return f"{cut}~{digest}{suffix}"


def fit_key(key: str, *, limit: int = KEY_MAX_CHARS) -> str:
    """``key`` made storable and cut to ``limit`` characters (with a digest when cut)."""
    return fit_id(key, limit=limit)


class Message(BaseModel):
    """Base of every command and event payload (the envelope's `data`).

    Every message keeps the acceptance rule (`slotflow.contracts.acceptance`): built or decoded,
    one that some service could not store is refused here, naming the field.
    """

    # Non-finite numbers serialise as `NaN`/`Infinity` (pydantic's default writes null, which hid
    # them from the rule's scan); a message that keeps the rule never holds one.
    model_config = ConfigDict(frozen=True, extra="ignore", ser_json_inf_nan="constants")

    message_type: ClassVar[str]
    message_version: ClassVar[int] = 1

    @model_validator(mode="after")
    def _acceptable(self, info: ValidationInfo) -> Self:
        # A fact a service reads back from its own storage was accepted when it was stored.
        context = info.context
        if not (isinstance(context, dict) and context.get(STORED_KEY)):
            check_acceptable(self)
        return self


class CommandProof(BaseModel):
    """Who signed a command, when, and the signature (`slotflow.principals`, docs/security.md).

    `signature` is the Ed25519 signature, base64url without padding, by the private half of the
    registered key `key_id`, over the command's canonical bytes
    (`slotflow.principals.signing.canonical_bytes`: the topic, every envelope field but the proof
    itself, `key_id` and `signed_at`). `signed_at` is the signer's clock; the consumer judges it
    against the database's (the replay window).
    """

    model_config = ConfigDict(frozen=True, extra="ignore")

    key_id: str = Field(min_length=1, max_length=PROOF_FIELD_MAX_CHARS)
    signed_at: AwareDatetime
    signature: str = Field(min_length=1, max_length=PROOF_FIELD_MAX_CHARS)


class Envelope(BaseModel):
    """What goes on the wire: routing facts plus the message as `data`."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    type: str = Field(min_length=1, max_length=200)
    version: int = Field(ge=1)
    #: Deterministic where it can be (a run's slot label, a command's id): duplicates collapse on it.
    id: IdText
    key: Annotated[str, Field(max_length=KEY_MAX_CHARS), AfterValidator(within_id_bytes)]
    occurred_at: AwareDatetime
    source: str = Field(min_length=1, max_length=200)
    data: dict[str, Any]
    #: Who issued a command (`token:oncall`, `oidc:alice@example.com`, `bootstrap`), as the api
    #: authenticated them; absent on events and on commands from clients that name nobody. Added
    #: within version 1: optional, left out of the record when absent, ignored by older readers.
    principal: str | None = Field(default=None, min_length=1, max_length=PRINCIPAL_MAX_CHARS)
    #: The signature that proves `principal` (commands only). Added within version 1 like
    #: `principal`: optional, left out of the record when absent. Where signatures are required
    #: (SLOTFLOW_COMMAND_SIGNATURES=required) a command without a valid one is rejected.
    proof: CommandProof | None = None

    @model_validator(mode="after")
    def _storable_names(self) -> Self:
        # The id and key are the identity check's (`slotflow.contracts.identity`), the data the
        # message's; these two are stored as they are by whoever records who sent what.
        for where, text in (("source", self.source), ("principal", self.principal or "")):
            why = text_refusal(text, where)
            if why is not None:
                raise ValueError(why)
        return self


def wrap(
    message: Message,
    *,
    id: str,
    key: str,
    source: str,
    occurred_at: datetime,
    principal: str | None = None,
) -> Envelope:
    """Put ``message`` into an envelope named by its own type and version."""
    return Envelope(
        type=message.message_type,
        version=message.message_version,
        id=id,
        key=key,
        occurred_at=occurred_at,
        source=source,
        data=message.model_dump(mode="json"),
        principal=principal,
    )


def envelope_headers(envelope: Envelope) -> dict[str, bytes]:
    """Routing headers that let a reader see the type without parsing the value."""
    return {TYPE_HEADER: envelope.type.encode(), VERSION_HEADER: str(envelope.version).encode()}
