"""Proven principals: commands signed with a key registered per principal, and their check.

- `signing`: the canonical bytes a signature covers, `Signer`, key files and key ids;
- `keyring`: the registered keys, followed from the keys topic only the api writes;
- `verify`: `CommandVerifier`, the check every command consumer makes before applying a command;
- `settings`: `SignatureSettings` (`SLOTFLOW_COMMAND_SIGNATURES`, the replay window, the signing key).

The design, the threats it answers and those it does not: docs/decisions/0007-proven-principals.md.
"""

from slotflow.principals.keyring import KafkaKeyRing, KeyRing
from slotflow.principals.settings import SignatureSettings
from slotflow.principals.signing import Signer, canonical_bytes, key_id_of, load_signer
from slotflow.principals.verify import CommandVerifier, Proven, UnprovenCommand

__all__ = [
    "CommandVerifier",
    "KafkaKeyRing",
    "KeyRing",
    "Proven",
    "SignatureSettings",
    "Signer",
    "UnprovenCommand",
    "canonical_bytes",
    "key_id_of",
    "load_signer",
]
