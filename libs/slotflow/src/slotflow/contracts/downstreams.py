"""Downstreams: the commands an operator sends about a dependency's breaker, and what claimers report.

A downstream is a dependency handlers name (`@handler(..., downstreams=["bank-api"])`); its retry
budget and circuit breaker live in the claimers' database (docs/claimer.md). These messages travel
on the downstream topics: commands to the claimers (one of them applies each, once, and answers
with CommandAccepted or CommandRejected), and every breaker change and a periodic report to the api.
"""

from typing import Annotated, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from slotflow.contracts.acceptance import INT4_MAX
from slotflow.contracts.envelope import Message

#: A downstream's name: what handlers declare; printable, no slash (it is a path segment in the api).
DownstreamName = Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[^/\x00-\x1f\x7f]+$")]
CircuitState = Literal["closed", "open", "half_open"]
Reason = Annotated[str, Field(min_length=1, max_length=1000)]


class DownstreamSettings(BaseModel):
    """One downstream's budget and breaker settings; a field left out keeps the claimers' default
    (`SLOTFLOW_CLAIMER_DOWNSTREAM_*`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    retry_ratio: float | None = Field(default=None, ge=0, le=100)
    min_retries_per_second: float | None = Field(default=None, ge=0, le=100_000)
    window_seconds: float | None = Field(default=None, gt=0, le=86_400)
    failure_rate: float | None = Field(default=None, gt=0, le=1)
    min_volume: int | None = Field(default=None, ge=1, le=1_000_000)
    cooldown_seconds: float | None = Field(default=None, gt=0, le=86_400)
    probes: int | None = Field(default=None, ge=1, le=10_000)


class OpenDownstream(Message):
    """Open a downstream's circuit by hand: no run calls it until an operator closes it.

    Runs that need it are held (not failed, their attempts kept) with reason `operator_open`.
    """

    message_type = "downstream.open"
    downstream: DownstreamName
    reason: Reason


class CloseDownstream(Message):
    """Close a downstream's circuit (opened by hand or by its failures): the window starts afresh
    and the runs held for it resume, in slot order."""

    message_type = "downstream.close"
    downstream: DownstreamName
    reason: Reason


class ConfigureDownstream(Message):
    """Set one downstream's own settings (replacing any it had); `{}` returns it to the defaults."""

    message_type = "downstream.configure"
    downstream: DownstreamName
    settings: DownstreamSettings


class DownstreamChanged(Message):
    """A downstream's circuit moved (or an operator configured it), in the transaction that did it.

    The id is `{downstream}/{change number}`: one event per recorded change.
    """

    message_type = "downstream.changed"
    downstream: DownstreamName
    from_state: CircuitState
    to_state: CircuitState
    #: failures | cooldown | probe_succeeded | probe_failed | operator_open | operator_close | configured
    cause: str = Field(max_length=100)
    reason: str = Field(default="", max_length=2000)
    #: Opened by an operator: it stays open until closed by one.
    manual: bool = False
    #: The claimer that made the change.
    by: str = Field(max_length=400)
    #: The command that asked for it, for an operator's change.
    command_id: str | None = Field(default=None, max_length=1000)
    #: Runs waiting for this downstream at the change (a close resumes them, in slot order).
    held: int = Field(default=0, ge=0, le=INT4_MAX)
    settings: DownstreamSettings = Field(default_factory=DownstreamSettings)
    at: AwareDatetime


class DownstreamReported(Message):
    """A downstream's state, window and held runs as its claimers see it, sent every few seconds
    by one claimer (whichever reports first), so a view can show the budget in use."""

    message_type = "downstream.reported"
    downstream: DownstreamName
    state: CircuitState
    manual: bool = False
    #: The window the counts are over, and its counts (attempts admitted, results seen).
    window_seconds: float = Field(gt=0)
    first_attempts: int = Field(ge=0, le=INT4_MAX)
    retries: int = Field(ge=0, le=INT4_MAX)
    retry_allowance: int = Field(ge=0, le=INT4_MAX)
    successes: int = Field(ge=0, le=INT4_MAX)
    failures: int = Field(ge=0, le=INT4_MAX)
    held: int = Field(ge=0, le=INT4_MAX)
    settings: DownstreamSettings = Field(default_factory=DownstreamSettings)
    changed_at: AwareDatetime
    at: AwareDatetime
