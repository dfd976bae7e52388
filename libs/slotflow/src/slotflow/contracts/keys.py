"""The signing keys of principals, as the api distributes them to every service that checks commands.

Only the api writes the keys topic (its ACL: docs/security.md); each record is the whole current
state of one key, keyed by its id, so the compacted topic keeps exactly one record per key and a
service reading it from the start knows every key and every revocation.
"""

from typing import Annotated

from pydantic import AwareDatetime, Field

from slotflow.contracts.envelope import PRINCIPAL_MAX_CHARS, Message
from slotflow.contracts.scopes import Scope

#: A key's name, as an admin gives it (`slotflow key create --name alice`); its principal is
#: `key:<name>`. The same alphabet as an API token's name.
KEY_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,99}$"
KeyId = Annotated[str, Field(pattern=r"^k_[0-9a-f]{32}$")]


class SigningKey(Message):
    """One principal's Ed25519 public key, the scope it signs with, and whether it is revoked."""

    message_type = "principal.key"
    key_id: KeyId = Field(description="`k_` and 32 hex digits of the SHA-256 of the raw public key")
    name: str = Field(pattern=KEY_NAME_PATTERN)
    principal: str = Field(
        min_length=1, max_length=PRINCIPAL_MAX_CHARS, description="whose key: `key:<name>`"
    )
    scope: Scope
    public_key: str = Field(pattern=r"^[A-Za-z0-9_-]{43}$", description="32 raw bytes, base64url, no padding")
    #: The api's own key only: the api signs commands on behalf of the callers it authenticated and
    #: names them as the command's principal. No key registered through the api has it.
    acts_for_others: bool = False
    created_at: AwareDatetime
    created_by: str | None = None
    revoked_at: AwareDatetime | None = None
    revoked_by: str | None = None
