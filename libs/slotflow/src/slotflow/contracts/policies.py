"""Per-schedule policies: what happens to missed slots, overlapping runs, retries and DST."""

from datetime import timedelta
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from slotflow.core.durations import lenient_duration

#: A duration field: ISO 8601 (`PT15M`) or seconds as pydantic reads them, and the CLI's short
#: forms (`15m`, `1h30m`, `250ms`) too, so a body is read the same over HTTP as on the command line.
Duration = Annotated[timedelta, BeforeValidator(lenient_duration)]


#: What a dead-lettered activity does to its workflow (docs/workflows.md): `fail` hands the code an
#: ActivityFailed (it raises ActivityError, and a saga compensates); `park` appends ActivityParked
#: with the DLQ reason, keeps the step pending and parks the run's letter in the DLQ, so an
#: operator can retry it through the workflow (RetryActivity). Carried on the activity's JobDue too:
#: the claimer parks a letter for an activity's run only under `park`.
DeadLetterPolicy = Literal["fail", "park"]


class _Policy(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class MisfirePolicy(_Policy):
    """What a schedule does with slots that passed while nothing could fire them.

    `fire_all` runs every missed slot (at most `max_catch_up`, newest kept), `fire_once` runs one
    run for the newest missed slot, `skip` jumps to the next future slot. Every slot not run is
    recorded as `SlotSkipped`. Slots older than `catch_up_window` are never run.
    """

    policy: Literal["fire_all", "fire_once", "skip"] = "fire_once"
    max_catch_up: int = Field(default=100, ge=1, le=10_000)
    catch_up_window: Duration = Field(default=timedelta(days=1), gt=timedelta(0))
    #: A slot counts as missed (not merely late) once it is this far behind the database clock.
    grace: Duration = Field(default=timedelta(seconds=60), ge=timedelta(0))


class DstPolicy(_Policy):
    """Wall-clock cron in a zone with DST: which instant(s) a local time means on change days."""

    #: A local time that happens twice (clocks go back): fire at the first, the last, or both.
    repeated: Literal["first", "last", "both"] = "first"
    #: A local time that never happens (clocks go forward): shift to the next valid instant, or skip.
    nonexistent: Literal["shift", "skip"] = "shift"


#: What a new run does while an earlier run of its job is live: `allow` runs it alongside, `skip`
#: records it as skipped, `buffer_one` keeps at most one waiting (a second is skipped),
#: `buffer_all` queues every one and starts them in slot order (at most the JobDue's
#: `max_concurrent` at once; a backfill's default), `cancel_previous` cancels the running one.
OverlapPolicy = Literal["allow", "skip", "buffer_one", "buffer_all", "cancel_previous"]


#: `RetryPolicy.max_attempts` meaning "no limit" (Temporal's `maximum_attempts=0`).
UNLIMITED_ATTEMPTS = 0
#: `RetryPolicy.backoff_coefficient` when none is given: the interval doubles, as before the field.
DEFAULT_BACKOFF_COEFFICIENT = 2.0


class RetryPolicy(_Policy):
    """Full-jitter exponential back-off: the wait before attempt ``n + 1`` is
    ``random(0, min(cap, base * backoff_coefficient**(n - 1)))``.

    Temporal's names: ``base`` is `initial_interval`, ``cap`` `maximum_interval`,
    ``max_attempts`` `maximum_attempts` (0: no limit), ``non_retryable``
    `non_retryable_error_types`. Unlike Temporal's, every wait is drawn at random below that
    ceiling (full jitter), so runs that failed together do not come back together.

    A new field is left out of the JSON while it holds its default, so a policy that does not use
    it reads on a consumer of the release before it (whose model forbids unknown fields); one that
    does (a `backoff_coefficient` other than 2, `max_attempts=0`, a `heartbeat_timeout`) needs
    every claimer, orchestrator and api upgraded first (docs/workflows.md, "Retries").
    """

    # The serializer below leaves a field out at its default; the schema a reader validates
    # against (the api's OpenAPI for answers too) is still every field's.
    model_config = ConfigDict(frozen=True, extra="forbid", json_schema_mode_override="validation")

    base: Duration = Field(default=timedelta(seconds=1), gt=timedelta(0))
    cap: Duration = Field(default=timedelta(seconds=120), gt=timedelta(0))
    #: Attempts in all, the first included; 0: no limit (Temporal's spelling). An unlimited run is
    #: retried until it succeeds or fails permanently, bounded only by what bounds the run: an
    #: activity's `schedule_to_close` and its workflow's `execution_timeout`, a cancel, and the
    #: attempt counter's ceiling (`slotflow.core.retry.ATTEMPT_CEILING`).
    max_attempts: int = Field(default=5, ge=0, le=1000)
    #: How fast the ceiling of the wait grows: ``base * backoff_coefficient**(n - 1)`` before attempt
    #: ``n + 1``, never above ``cap``. 1 keeps it at ``base`` (a constant ceiling); 2, the default,
    #: doubles it.
    backoff_coefficient: float = Field(
        default=DEFAULT_BACKOFF_COEFFICIENT, ge=1.0, le=100.0, allow_inf_nan=False
    )
    #: Error type names (class `__name__` or dotted path) that are never retried.
    non_retryable: tuple[str, ...] = ()
    #: How long one attempt may run before it is cancelled and counted as a transient failure.
    start_to_close: Duration = Field(default=timedelta(minutes=5), gt=timedelta(0))
    #: How long an attempt may go without a heartbeat (`ctx.heartbeat`, from its start) before it
    #: fails with HeartbeatTimeout, a transient failure retried by this policy; None (the default):
    #: heartbeats are optional and nothing times out for want of one (Temporal's `heartbeat_timeout`).
    heartbeat_timeout: Annotated[Duration, Field(gt=timedelta(0))] | None = None

    @model_validator(mode="after")
    def _cap_not_below_base(self) -> "RetryPolicy":
        if self.cap < self.base:
            raise ValueError("cap cannot be less than base")
        return self

    @property
    def unlimited(self) -> bool:
        """Whether attempts have no limit (``max_attempts == 0``)."""
        return self.max_attempts == UNLIMITED_ATTEMPTS

    @model_serializer(mode="wrap")
    def _without_new_defaults(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # A consumer of the release before `backoff_coefficient` (or `heartbeat_timeout`) forbids
        # unknown fields: leave the field out while it holds its default, so every policy that does
        # not use it reads there.
        dumped: dict[str, Any] = handler(self)
        if self.backoff_coefficient == DEFAULT_BACKOFF_COEFFICIENT:
            dumped.pop("backoff_coefficient", None)
        if self.heartbeat_timeout is None:
            dumped.pop("heartbeat_timeout", None)
        return dumped
