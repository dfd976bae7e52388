"""Whether commands must be signed, how old a signed one may be, and the key a process signs with."""

from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from slotflow.errors import ConfigurationError
from slotflow.principals.signing import Signer, load_signer

DAY_S = 86_400.0


class SignatureSettings(BaseSettings):
    """`SLOTFLOW_COMMAND_SIGNATURES`, `SLOTFLOW_COMMAND_MAX_AGE_SECONDS`,
    `SLOTFLOW_COMMAND_MAX_SKEW_SECONDS`, `SLOTFLOW_SIGNING_KEY_FILE`, `SLOTFLOW_SIGNING_PRINCIPAL`.

    Every process of a deployment reads the same ones: the consumers to know whether to verify,
    the senders (the api, the claimer, the orchestrator, the CLI and the Python client straight
    to Kafka) to know whether to sign and with what.
    """

    model_config = SettingsConfigDict(env_prefix="SLOTFLOW_", extra="ignore")

    #: `required`: every consumed command must carry a valid signature by a registered key whose
    #: principal holds the command's scope; anything else is rejected. `optional` (the default,
    #: and what a plaintext deployment runs): signatures are neither required nor checked, and a
    #: command's principal is only what its writer claims.
    command_signatures: Literal["optional", "required"] = "optional"
    #: The replay window: a command signed longer ago than this, by the database's clock, is
    #: rejected. Seven days, as long as the command topics keep records, so any command still on
    #: its topic is inside it; every consumer's inbox must remember a command id longer than this
    #: plus the skew (the ticker's and the orchestrator's 8 days do), so a command written again
    #: is refused by its inbox while it is young enough and by this window once it is not.
    command_max_age_seconds: float = Field(default=7 * DAY_S, gt=0)
    #: How far ahead of the database's clock a signature may be dated (the signer's clock runs fast).
    command_max_skew_seconds: float = Field(default=300.0, ge=0, le=DAY_S)
    #: The PEM file of this process's Ed25519 private key (`slotflow key create` writes one).
    signing_key_file: Path | None = None
    #: The principal that key is registered for (`key:<name>`).
    signing_principal: str | None = Field(default=None, min_length=1, max_length=300)

    @property
    def required(self) -> bool:
        return self.command_signatures == "required"

    @property
    def replay_horizon_seconds(self) -> float:
        """How long after its signing a command can still be accepted: window plus skew."""
        return self.command_max_age_seconds + self.command_max_skew_seconds

    def check_inbox_outlasts_window(self, inbox_seconds: float, *, setting: str) -> None:
        """Refuse an inbox that forgets a command id while its signature could still be accepted:
        a command written to its topic again would then be applied twice.

        Raises:
            ConfigurationError: it does, with signatures required.
        """
        if self.required and inbox_seconds <= self.replay_horizon_seconds:
            raise ConfigurationError(
                f"{setting} ({inbox_seconds:g} s) must be longer than SLOTFLOW_COMMAND_MAX_AGE_SECONDS "
                f"plus SLOTFLOW_COMMAND_MAX_SKEW_SECONDS ({self.replay_horizon_seconds:g} s): a signed "
                "command written again after its id was forgotten would be accepted a second time"
            )

    def signer(self) -> Signer | None:
        """This process's signer, or None without a key file.

        Raises:
            ConfigurationError: a key file without its principal (or the reverse), or a bad file.
        """
        if self.signing_key_file is None and self.signing_principal is None:
            return None
        if self.signing_key_file is None or self.signing_principal is None:
            raise ConfigurationError(
                "SLOTFLOW_SIGNING_KEY_FILE and SLOTFLOW_SIGNING_PRINCIPAL go together: the key file "
                "and the principal it is registered for (`slotflow key create` prints both)"
            )
        return load_signer(self.signing_key_file, self.signing_principal)

    def service_signer(self, service: str) -> Signer | None:
        """The signer of a service that sends commands of its own (the claimer's and the
        orchestrator's timers, the orchestrator's child workflows).

        Raises:
            ConfigurationError: signatures are required and no key is configured (every command
                the service sent would be rejected), or the key settings are incomplete.
        """
        signer = self.signer()
        if signer is None and self.required:
            raise ConfigurationError(
                f"the {service} sends commands of its own and SLOTFLOW_COMMAND_SIGNATURES=required: "
                f"set SLOTFLOW_SIGNING_KEY_FILE and SLOTFLOW_SIGNING_PRINCIPAL to a key registered with "
                f"the admin scope (`slotflow key create --name {service} --scope admin`; docs/security.md)"
            )
        return signer
