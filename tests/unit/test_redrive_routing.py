"""Who owns a dead letter (`slotflow.redrive.route`) and the guard against selections that mean
every letter (`DeadLetterFilter.narrows`): pure rules the dlq service, the api's dry run, the CLI
and the client share (docs/decisions/0009)."""

from datetime import UTC, datetime

import pytest

from slotflow.client import Client, HttpTransport, InvalidRequest
from slotflow.contracts import DeadLetterFilter
from slotflow.contracts.topics import JOBS_DUE, SIGNING_KEYS
from slotflow.redrive import LetterFacts, Route, Unroutable, route
from slotflow.settings import KafkaSettings

KAFKA = KafkaSettings(bootstrap="127.0.0.1:1", topic_namespace="t1")
TOPICS = {spec.name: spec for spec in KAFKA.topics()}
JOBS = "t1.slotflow.jobs.due.v1"


def routed(letter: LetterFacts, definition: str = "as_run") -> Route | Unroutable:
    return route(letter, definition=definition, topics=TOPICS, jobs_due=JOBS)  # type: ignore[arg-type]


def test_a_schedules_dead_lettered_run_goes_to_the_claimer_or_with_current_to_the_ticker() -> None:
    run = LetterFacts(JOBS, 3, "claimer", "unknown_handler", run_id="pay@2026-12-01T00:00:00Z")
    assert routed(run) == Route("run", "claimer")
    assert routed(run, "current") == Route("run", "ticker")


def test_a_parked_activity_goes_to_its_workflow_whatever_the_definition() -> None:
    activity = LetterFacts(
        JOBS, 3, "claimer", "attempts_exhausted", run_id="o-1/5", workflow_id="o-1", sequence=5
    )
    assert routed(activity) == Route("activity", "orchestrator")
    assert routed(activity, "current") == Route("activity", "orchestrator")


@pytest.mark.parametrize(
    ("letter", "wanted"),
    [
        # A poison JobDue (not a run's failure) is the claimer's record to read back.
        (LetterFacts(JOBS, 1, "claimer", "invalid_payload", run_id="x"), Route("record", "claimer")),
        (
            LetterFacts("t1.slotflow.schedules.commands.v1", 0, "ticker", "unknown_type"),
            Route("record", "ticker"),
        ),
        (
            LetterFacts("t1.slotflow.runs.events.v1", 2, "orchestrator", "unproven_outcome"),
            Route("record", "orchestrator"),
        ),
        (LetterFacts("t1.slotflow.dlq.commands.v1", 0, "dlq", "invalid_payload"), Route("record", "dlq")),
    ],
)
def test_poison_goes_to_the_service_that_consumes_its_topic(letter: LetterFacts, wanted: Route) -> None:
    assert routed(letter) == wanted


@pytest.mark.parametrize(
    ("letter", "because"),
    [
        (
            LetterFacts("someone-elses.payments.v1", 0, "claimer", "permanent_error"),
            "not one of this deployment's",
        ),
        (LetterFacts(JOBS, -1, "outbox:ticker", "too_large"), "never reached its topic"),
        (LetterFacts("t1.slotflow.runs.events.v1", 0, "api", "permanent_error"), "slotflow-api rebuild"),
        # A letter naming a service that does not consume its topic has no owner to read it back.
        (
            LetterFacts("t1.slotflow.schedules.commands.v1", 0, "claimer", "invalid_payload"),
            "does not consume",
        ),
        (LetterFacts(JOBS, 0, "mallory", "permanent_error"), "does not consume"),
    ],
)
def test_a_letter_nobody_can_take_is_refused_with_why(letter: LetterFacts, because: str) -> None:
    answer = routed(letter)
    assert isinstance(answer, Unroutable)
    assert because in answer.reason


EVERYTHING = [
    DeadLetterFilter(),
    DeadLetterFilter(since=datetime(1970, 1, 1, tzinfo=UTC)),
    DeadLetterFilter(status="parked"),
    DeadLetterFilter(
        status="redriven", since=datetime(1970, 1, 1, tzinfo=UTC), until=datetime(2100, 1, 1, tzinfo=UTC)
    ),
]


@pytest.mark.parametrize("selection", EVERYTHING)
def test_every_spelling_of_everything_does_not_narrow(selection: DeadLetterFilter) -> None:
    assert not selection.narrows()


@pytest.mark.parametrize(
    "selection",
    [
        DeadLetterFilter(ids=("t:0:1",)),
        DeadLetterFilter(reason="unknown_handler"),
        DeadLetterFilter(source_service="claimer", status="parked"),
        DeadLetterFilter(workflow_id="o-1"),
        DeadLetterFilter(run_id="r", since=datetime(1970, 1, 1, tzinfo=UTC)),
    ],
)
def test_naming_what_a_letter_is_narrows(selection: DeadLetterFilter) -> None:
    assert selection.narrows()


@pytest.mark.parametrize("selection", EVERYTHING)
async def test_the_client_refuses_everything_before_sending(selection: DeadLetterFilter) -> None:
    client = Client(HttpTransport("http://127.0.0.1:9"))
    try:
        for call in (client.redrive_dead_letters, client.preview_redrive, client.preview_discard):
            with pytest.raises(InvalidRequest, match="it would take every dead letter"):
                await call(selection)
        with pytest.raises(InvalidRequest, match="it would take every dead letter"):
            await client.discard_dead_letters(selection, reason="x")
        with pytest.raises(InvalidRequest, match="but the selection narrows it"):
            await client.redrive_dead_letters(DeadLetterFilter(reason="r"), all=True)
    finally:
        await client.close()


@pytest.mark.parametrize("source", ["claimer", "ticker", "orchestrator", "dlq"])
def test_a_letter_about_the_keys_topic_is_refused_whoever_it_names(source: str) -> None:
    """Every owner reads the keys topic (its keyring), so a letter naming it would otherwise be
    routed to that owner to read a key record back; only the api writes it and no consumer parks a
    record of it, so the letter is forged and the dlq refuses it itself."""
    for namespace in ("", "t1"):
        kafka = KafkaSettings(bootstrap="127.0.0.1:1", topic_namespace=namespace)
        topics = {spec.name: spec for spec in kafka.topics()}
        letter = LetterFacts(kafka.topic(SIGNING_KEYS), 0, source, "permanent_error", run_id="r")
        answer = route(letter, definition="as_run", topics=topics, jobs_due=kafka.topic(JOBS_DUE))
        assert isinstance(answer, Unroutable)
        assert "the keys topic" in answer.reason
