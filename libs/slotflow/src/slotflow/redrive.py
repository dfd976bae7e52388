"""Who owns a dead letter's record, and so who is asked to redrive it (docs/decisions/0009).

Pure: the dlq service routes each letter of a redrive with `route`, and the api's dry run
previews the same answer from its read model, so what the preview says is what the redrive does.
A letter is only a pointer; the owner checks it against its own state before it acts, so a route
is never a permission.
"""

from collections.abc import Mapping
from dataclasses import dataclass

from slotflow.contracts.dlq import RedriveDefinition, RedriveKind
from slotflow.contracts.topics import DLQ_REDRIVES, SIGNING_KEYS, TopicSpec

#: The claimer's reasons for dead-lettering a run (docs/dlq.md, "Reasons"): a run, not a poison
#: record, so its redrive reopens the run from the claimer's own row.
RUN_REASONS = frozenset({"permanent_error", "attempts_exhausted", "unknown_handler", "quarantined"})
#: The services that answer redrive requests (they consume `dlq.redrives`).
OWNERS = frozenset(DLQ_REDRIVES.consumers)
#: Why a letter about the keys topic is never redriven: only the api writes it, and no consumer
#: parks a record of it (the keyrings follow it outside any consume loop), so such a letter is
#: forged; every owner reads the keys topic, and none may be asked to act on a record of it.
KEYS_TOPIC_REFUSAL = (
    "its topic is the keys topic: only the api writes it and no consumer parks a record of it, so a "
    "letter about it is forged and no service acts on it"
)


def is_keys_topic(spec: TopicSpec) -> bool:
    """Whether ``spec`` (a deployment's copy, its namespace in front) is the keys topic."""
    return spec.name == SIGNING_KEYS.name or spec.name.endswith(f".{SIGNING_KEYS.name}")


@dataclass(frozen=True, slots=True)
class LetterFacts:
    """What routing needs of a letter (its claims, as the dlq stored them)."""

    topic: str
    partition: int
    source_service: str
    reason: str
    run_id: str | None = None
    #: Set for a workflow's parked activity (the letter's own marks, or its JobDue's for older letters).
    workflow_id: str | None = None
    sequence: int | None = None


@dataclass(frozen=True, slots=True)
class Route:
    """The request a letter becomes: what is asked, and of which service."""

    kind: RedriveKind
    target: str


@dataclass(frozen=True, slots=True)
class Unroutable:
    """No service can carry the letter through again; `reason` says why (the letter's note)."""

    reason: str


def workflow_owned(letter: LetterFacts) -> bool:
    """Whether the letter is a workflow's parked activity: retried only through its workflow, and
    left out of a bulk redrive (a selection without ids)."""
    return letter.workflow_id is not None and letter.sequence is not None


def route(
    letter: LetterFacts,
    *,
    definition: RedriveDefinition,
    topics: Mapping[str, TopicSpec],
    jobs_due: str,
) -> Route | Unroutable:
    """Where a redrive of ``letter`` goes.

    ``topics`` maps this deployment's topic names (namespace included) to their specs, and
    ``jobs_due`` is its JobDue topic's name.
    """
    spec = topics.get(letter.topic)
    if spec is None:
        return Unroutable(f"its topic {letter.topic!r} is not one of this deployment's")
    if is_keys_topic(spec):
        return Unroutable(KEYS_TOPIC_REFUSAL)
    if letter.partition < 0:
        return Unroutable(
            "it never reached its topic (an outbox row the topic refused, or an input kept without its "
            "position): there is no record to read back; fix the cause and issue it again"
        )
    if workflow_owned(letter):
        return Route("activity", "orchestrator")
    if (
        letter.topic == jobs_due
        and letter.source_service == "claimer"
        and letter.reason in RUN_REASONS
        and letter.run_id is not None
    ):
        return Route("run", "ticker" if definition == "current" else "claimer")
    source = letter.source_service
    if source == "api":
        return Unroutable(
            "the api's projector parked it: the read model is rebuilt from the topics (slotflow-api "
            "rebuild), which reads this record again"
        )
    if source not in spec.consumers:
        return Unroutable(
            f"{source!r} does not consume {letter.topic}: no service of this deployment reads it back"
        )
    if source not in OWNERS:
        return Unroutable(f"{source!r} does not take redrive requests")
    return Route("record", source)
