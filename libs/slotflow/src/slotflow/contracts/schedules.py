"""Schedule commands (consumed by the ticker) and schedule events (produced by it)."""

import zoneinfo
from datetime import datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_validator, model_validator

from slotflow.contracts.envelope import (
    IDENTIFIER_PATTERN,
    PRINCIPAL_MAX_CHARS,
    SCHEDULE_ID_PATTERN,
    IdText,
    IndexedText,
    Message,
)
from slotflow.contracts.policies import DstPolicy, Duration, MisfirePolicy, OverlapPolicy, RetryPolicy
from slotflow.core._cronfields import parse_expression

ScheduleId = Annotated[str, Field(pattern=SCHEDULE_ID_PATTERN)]
HandlerName = Annotated[str, Field(pattern=IDENTIFIER_PATTERN)]


class _Spec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class CronSpec(_Spec):
    """Cron in a time zone. 5 fields (minute first) or 6 fields (seconds first, as Quartz).

    The grammar and what each form means: docs/scheduling.md ("Cron expressions").
    """

    kind: Literal["cron"] = "cron"
    expression: str = Field(min_length=1, max_length=200)
    timezone: str = "UTC"

    @field_validator("expression")
    @classmethod
    def _valid_cron(cls, value: str) -> str:
        fields = value.split()
        if len(fields) not in (5, 6):
            raise ValueError(f"cron expression needs 5 or 6 fields, got {len(fields)}")
        expression = " ".join(fields)
        # The same parser the slots are computed with (InvalidCronExpression is a ValueError).
        parse_expression(expression)
        return expression

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        try:
            zoneinfo.ZoneInfo(value)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError) as err:
            raise ValueError(f"unknown IANA time zone {value!r}") from err
        return value


class IntervalSpec(_Spec):
    """Every `every`, on a grid anchored at `anchor` (never at when a run finished)."""

    kind: Literal["interval"] = "interval"
    every: Duration = Field(ge=timedelta(seconds=1))
    anchor: AwareDatetime = datetime.fromisoformat("2000-01-01T00:00:00+00:00")


class OnceSpec(_Spec):
    """A single slot."""

    kind: Literal["once"] = "once"
    at: AwareDatetime


ScheduleSpec = Annotated[CronSpec | IntervalSpec | OnceSpec, Field(discriminator="kind")]

#: The field that only one kind of spec has, so a spec written without its `kind` still says it.
_KIND_BY_FIELD = {"expression": "cron", "every": "interval", "at": "once"}


def inferred_kind(spec: dict[str, Any]) -> str | None:
    """The kind a spec object names, or the one its fields imply (`every` -> interval); None if neither."""
    kind = spec.get("kind")
    if isinstance(kind, str):
        return kind
    implied = {k for field, k in _KIND_BY_FIELD.items() if field in spec}
    return implied.pop() if len(implied) == 1 else None


def _with_kind(spec: Any) -> Any:
    if isinstance(spec, dict) and "kind" not in spec:
        kind = inferred_kind(spec)
        if kind is not None:
            return {"kind": kind, **spec}
    return spec


class ScheduleDefinition(BaseModel):
    """Everything a schedule is; CreateSchedule and UpdateSchedule carry one whole."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    spec: ScheduleSpec
    handler: HandlerName
    payload: dict[str, Any] = Field(default_factory=dict)
    misfire: MisfirePolicy = MisfirePolicy()
    dst: DstPolicy = DstPolicy()
    overlap: OverlapPolicy = "skip"
    retry: RetryPolicy = RetryPolicy()
    #: Each slot fires up to this much late, by an amount fixed per slot (spreads a herd of :00 jobs).
    jitter: Duration = Field(default=timedelta(0), ge=timedelta(0), le=timedelta(hours=1))
    start_at: AwareDatetime | None = None
    end_at: AwareDatetime | None = None
    tags: tuple[Annotated[str, Field(max_length=100)], ...] = ()

    @model_validator(mode="before")
    @classmethod
    def _spec_kind_implied(cls, data: Any) -> Any:
        # Each spec's `kind` has a default in the schema; a spec written without it is read by
        # the one field only its kind has ({"every": "PT15M"} is an interval).
        if isinstance(data, dict) and isinstance(data.get("spec"), dict):
            return {**data, "spec": _with_kind(data["spec"])}
        return data

    @model_validator(mode="after")
    def _window_ordered(self) -> "ScheduleDefinition":
        if self.start_at and self.end_at and self.end_at <= self.start_at:
            raise ValueError("end_at must be after start_at")
        return self


def refuse_random_cron(definition: ScheduleDefinition) -> None:
    """A definition being created or changed may not use `R`.

    croniter draws `R` at random in each process, so two tickers would fire it at different times.
    A schedule stored with `R` is read as `H` (a value fixed by the schedule id) and keeps firing;
    a new or changed definition says `H` itself.

    Raises:
        ValueError: the definition's cron uses `R`.
    """
    spec = definition.spec
    if isinstance(spec, CronSpec) and parse_expression(spec.expression).random:
        raise ValueError(
            f"the cron expression {spec.expression!r} uses R, a value croniter draws at random in "
            "each process, so two tickers would fire it at different times; write H instead, a "
            "value fixed by the schedule id (the same in every process)"
        )


class CreateSchedule(Message):
    """Create a schedule; a second create with the same id is rejected (use UpdateSchedule)."""

    message_type = "schedule.create"
    schedule_id: ScheduleId
    definition: ScheduleDefinition
    paused: bool = False

    @model_validator(mode="after")
    def _no_random_cron(self) -> "CreateSchedule":
        refuse_random_cron(self.definition)
        return self


#: A patch may name these top-level fields of a ScheduleDefinition, nothing else.
PATCHABLE = frozenset(ScheduleDefinition.model_fields)
#: Fields a patch replaces whole instead of merging: the handler's payload is its data, not ours.
ATOMIC_FIELDS = ("payload",)


def merge_patch(target: Any, patch: Any) -> Any:
    """``patch`` applied to ``target`` as a JSON merge patch (RFC 7396): objects merge key by key,
    null removes a key (so the field takes its default), anything else replaces."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def patch_definition(definition: ScheduleDefinition, patch: dict[str, Any]) -> ScheduleDefinition:
    """``definition`` with ``patch`` merged in: only what the patch names changes.

    A spec of another kind (a cron patched into an interval) replaces the spec whole, since the
    old kind's fields mean nothing to the new one.

    Raises:
        ValueError (pydantic.ValidationError): the result is not a valid definition.
    """
    current = definition.model_dump(mode="json")
    spec = patch.get("spec")
    if isinstance(spec, dict):
        kind = inferred_kind(spec) or current["spec"]["kind"]
        if kind != current["spec"]["kind"]:
            current["spec"] = {}
            patch = {**patch, "spec": {"kind": kind, **spec}}
    for name in ATOMIC_FIELDS:
        # The handler's own data is replaced whole, never merged key by key into the old one.
        if patch.get(name) is not None:
            current.pop(name, None)
    return ScheduleDefinition.model_validate(merge_patch(current, patch))


def definition_changes(before: ScheduleDefinition, after: ScheduleDefinition) -> list[tuple[str, Any, Any]]:
    """(dotted field, old value, new value) for every leaf that differs, in field order."""
    out: list[tuple[str, Any, Any]] = []

    def walk(path: str, old: Any, new: Any) -> None:
        if isinstance(old, dict) and isinstance(new, dict):
            for key in dict.fromkeys([*old, *new]):
                walk(f"{path}.{key}" if path else key, old.get(key), new.get(key))
        elif old != new:
            out.append((path, old, new))

    walk("", before.model_dump(mode="json"), after.model_dump(mode="json"))
    return out


class UpdateSchedule(Message):
    """Change a schedule's definition; its next slot is recomputed from the new spec.

    Exactly one of `definition` (the whole new definition: what it leaves out takes the default)
    or `patch` (a JSON merge patch, RFC 7396, of the definition: only what it names changes, null
    resets a field to its default) is given. The ticker applies a patch to its own stored
    definition, so two patches of different fields never undo each other.
    """

    message_type = "schedule.update"
    schedule_id: ScheduleId
    definition: ScheduleDefinition | None = None
    patch: dict[str, Any] | None = Field(default=None, max_length=len(PATCHABLE))

    @model_validator(mode="after")
    def _one_way(self) -> "UpdateSchedule":
        if (self.definition is None) == (self.patch is None):
            raise ValueError("give exactly one of definition (replace it whole) or patch (change fields)")
        if self.definition is not None:
            refuse_random_cron(self.definition)
        if self.patch is not None:
            if not self.patch:
                raise ValueError("the patch changes nothing; name at least one field")
            unknown = sorted(set(self.patch) - PATCHABLE)
            if unknown:
                raise ValueError(
                    f"the patch names unknown fields {unknown}; a definition has {sorted(PATCHABLE)}"
                )
        return self


class PauseSchedule(Message):
    """Stop firing until resumed, or until `resume_at` if given."""

    message_type = "schedule.pause"
    schedule_id: ScheduleId
    reason: str = Field(default="", max_length=1000)
    resume_at: AwareDatetime | None = None


class ResumeSchedule(Message):
    """Fire again. Slots that passed while paused are skipped (`SlotSkipped`, reason `paused`)
    unless `catch_up` is set; then they meet the misfire policy like slots missed while the
    ticker was down (docs/scheduling.md, "Pause and resume")."""

    message_type = "schedule.resume"
    schedule_id: ScheduleId
    catch_up: bool = Field(
        default=False,
        description="run the slots that passed while paused under the misfire policy instead of "
        "skipping them (absent in records written before the field existed: false)",
    )


class DeleteSchedule(Message):
    """Stop and remove a schedule; its recorded runs stay."""

    message_type = "schedule.delete"
    schedule_id: ScheduleId


class TriggerNow(Message):
    """Run the schedule once now, outside its spec; the slot is the command's own time."""

    message_type = "schedule.trigger"
    schedule_id: ScheduleId


class Backfill(Message):
    """Emit a run for every slot of the spec in [start, end), whatever the misfire policy says.

    The runs carry the backfill's own overlap policy, not the schedule's: by default
    (`buffer_all`, `max_concurrent` 1) they run one after another in slot order, so a backfill of
    60 slots runs 60 times instead of running one and skipping 59 as "still running".
    """

    message_type = "schedule.backfill"
    schedule_id: ScheduleId
    start: AwareDatetime
    end: AwareDatetime
    max_slots: int = Field(default=1000, ge=1, le=100_000)
    overlap: OverlapPolicy = "buffer_all"
    #: With `buffer_all`: how many of the backfill's runs may run at once.
    max_concurrent: int = Field(default=1, ge=1, le=1000)

    @model_validator(mode="after")
    def _ordered(self) -> "Backfill":
        if self.end <= self.start:
            raise ValueError("end must be after start")
        return self


#: The most slots one RerunSlots or MarkSlots names (the api's range is cut to it).
REPAIR_MAX_SLOTS = 1000


def _distinct_slots(*groups: tuple[datetime, ...]) -> None:
    """Refuse a slot named twice (once per command, however it is spelt: one instant, one slot)."""
    seen: set[datetime] = set()
    for group in groups:
        for slot in group:
            if slot in seen:
                raise ValueError(f"slot {slot.isoformat()} is named twice")
            seen.add(slot)


class RerunSlots(Message):
    """Run slots of a schedule again with its CURRENT definition (handler, payload, policy).

    The ticker re-issues each slot's JobDue and records the re-run with its number (per slot, one
    above the slot's last); the claimer takes such a JobDue only when the ticker's record holds it,
    so a forged re-run runs nothing. A slot of `slots` keeps its run id: the claimer reopens its
    dead-lettered, retrying, skipped or cancelled run, or starts a missed one, and leaves a live or
    completed run alone. A slot of `forced` (a completed one, run again on purpose) becomes a new
    run `{run id}#rerun-{n}`, so a handler's idempotency key sees it as new. Who decides which slot
    goes where is the sender (the api from its read model); the claimer's rules hold either way.
    """

    message_type = "schedule.rerun"
    schedule_id: ScheduleId
    slots: tuple[AwareDatetime, ...] = Field(default=(), max_length=REPAIR_MAX_SLOTS)
    forced: tuple[AwareDatetime, ...] = Field(default=(), max_length=REPAIR_MAX_SLOTS)
    reason: str = Field(min_length=1, max_length=1000)

    @model_validator(mode="after")
    def _some_slot(self) -> "RerunSlots":
        if not self.slots and not self.forced:
            raise ValueError("name at least one slot to re-run")
        if len(self.slots) + len(self.forced) > REPAIR_MAX_SLOTS:
            raise ValueError(f"at most {REPAIR_MAX_SLOTS} slots a re-run")
        if not self.reason.strip():
            raise ValueError("a re-run needs a reason")
        _distinct_slots(self.slots, self.forced)
        return self


SlotMark = Literal["done", "skipped"]


class MarkSlots(Message):
    """Record slots as done or skipped by an operator, with a reason; no effect runs.

    The ticker records the mark (`SlotsMarked`); the audit shows it ("marked done by X: reason").
    A mark stops nothing already in flight, so the api refuses slots whose run is in progress; a
    later RerunSlots of a marked slot is allowed.
    """

    message_type = "schedule.mark"
    schedule_id: ScheduleId
    slots: tuple[AwareDatetime, ...] = Field(min_length=1, max_length=REPAIR_MAX_SLOTS)
    mark: SlotMark
    reason: str = Field(min_length=1, max_length=1000)

    @model_validator(mode="after")
    def _valid(self) -> "MarkSlots":
        if not self.reason.strip():
            raise ValueError("a mark needs a reason")
        _distinct_slots(self.slots)
        return self


class SlotRerun(BaseModel):
    """One slot a RerunSlots re-issued: its run id, its re-run number, whether forced."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    slot: AwareDatetime
    run_id: IdText
    number: int = Field(ge=1, le=2_147_483_647)
    forced: bool


class SlotsRerun(Message):
    """The ticker re-issued slots for an operator's RerunSlots (who, why, each slot's number)."""

    message_type = "slots.rerun"
    schedule_id: ScheduleId
    reruns: tuple[SlotRerun, ...] = Field(min_length=1, max_length=REPAIR_MAX_SLOTS)
    handler: HandlerName
    principal: str | None = Field(default=None, max_length=PRINCIPAL_MAX_CHARS)
    reason: str = Field(max_length=1000)


class SlotsMarked(Message):
    """The ticker recorded an operator's mark of slots as done or skipped (who, why)."""

    message_type = "slots.marked"
    schedule_id: ScheduleId
    slots: tuple[AwareDatetime, ...] = Field(min_length=1, max_length=REPAIR_MAX_SLOTS)
    mark: SlotMark
    principal: str | None = Field(default=None, max_length=PRINCIPAL_MAX_CHARS)
    reason: str = Field(max_length=1000)


class ScheduleCreated(Message):
    """The ticker stored a new schedule."""

    message_type = "schedule.created"
    schedule_id: ScheduleId
    definition: ScheduleDefinition
    paused: bool
    next_fire_at: AwareDatetime | None


class ScheduleUpdated(Message):
    """The ticker changed a schedule's definition; `definition` is the whole new one."""

    message_type = "schedule.updated"
    schedule_id: ScheduleId
    definition: ScheduleDefinition
    next_fire_at: AwareDatetime | None
    #: The dotted fields that changed (`spec.every`, `handler`, `retry.max_attempts`).
    changed: tuple[str, ...] = ()


class SchedulePaused(Message):
    """A schedule stopped firing."""

    message_type = "schedule.paused"
    schedule_id: ScheduleId
    reason: str
    resume_at: AwareDatetime | None


class ScheduleResumed(Message):
    """A schedule fires again."""

    message_type = "schedule.resumed"
    schedule_id: ScheduleId
    next_fire_at: AwareDatetime | None


class ScheduleDeleted(Message):
    """A schedule was removed."""

    message_type = "schedule.deleted"
    schedule_id: ScheduleId


class SlotSkipped(Message):
    """A slot that will not run, and why: nothing is dropped silently."""

    message_type = "slot.skipped"
    schedule_id: ScheduleId
    run_id: IdText
    slot: AwareDatetime
    reason: Literal["misfire", "outside_catch_up_window", "dst_nonexistent", "paused", "overlap"]
    detail: str = ""


class CommandAccepted(Message):
    """A command was applied (read-your-writes: the api waits for this)."""

    message_type = "command.accepted"
    command_id: IdText
    command_type: IndexedText
    subject: IndexedText


class CommandRejected(Message):
    """A command could not be applied; the reason says what to fix."""

    message_type = "command.rejected"
    command_id: IdText
    command_type: IndexedText
    subject: IndexedText
    reason: str
