"""Traces on the real broker and database, spans recorded in memory: a scheduled run is one trace
from the ticker's JobDue through the claimer's claim and handler to RunCompleted, each span the
child of the one before (the context crossing Kafka in record headers and the outboxes in their
rows); a workflow of examples/orders is one trace from its start through every activity's run.
"""

from collections.abc import Iterator, Sequence
from datetime import timedelta

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from slotflow import tracing
from slotflow.contracts import (
    ActivityScheduled,
    CreateSchedule,
    OnceSpec,
    RetryPolicy,
    ScheduleDefinition,
    StartWorkflow,
)
from slotflow.contracts.topics import JOBS_DUE, RUN_EVENTS, WORKFLOW_COMMANDS
from slotflow.core.identity import run_id
from slotflow.errors import PermanentError
from slotflow.kafka.producer import Producer
from slotflow.pg.pool import Pool
from slotflow.runs import HandlerRegistry, RunContext
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from slotflow.testing.spans import recorded_spans
from slotflow_orchestrator.workflow_code import RuntimeWorkflowCode
from tests.integration.claimer.support import wait_state
from tests.integration.orchestrator.conftest import StartClaimer
from tests.integration.orchestrator.orders_example import (
    WORKFLOW_TYPE,
    Sandbox,
    order,
    orders_registry,
    orders_workflow_code,
    sandbox,  # noqa: F401 - the example's sandbox fixture
)
from tests.integration.orchestrator.support import Workflows
from tests.integration.ticker.support import Replica, db_now, send


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    with recorded_spans() as exporter:
        yield exporter


@pytest.fixture
def workflow_code() -> RuntimeWorkflowCode:
    return orders_workflow_code()


@pytest.fixture
def registry() -> HandlerRegistry:
    registry = orders_registry()

    async def traced_payout(ctx: RunContext) -> dict[str, int]:
        return {"paid": ctx.payload["amount_cents"]}

    async def declined(ctx: RunContext) -> None:
        raise PermanentError("card declined")

    async def flaky(ctx: RunContext) -> str:
        if ctx.attempt == 1:
            raise ConnectionError("gateway unavailable")
        return "paid"

    registry.register("test.traced_payout", traced_payout)
    registry.register("test.declined", declined)
    registry.register("test.flaky", flaky)
    return registry


def _attr(span: ReadableSpan, name: str) -> object:
    return (span.attributes or {}).get(name)


def _one(found: Sequence[ReadableSpan], what: str) -> ReadableSpan:
    assert len(found) == 1, f"{what}: {[(s.name, dict(s.attributes or {})) for s in found]}"
    return found[0]


def _child_of(child: ReadableSpan, parent: ReadableSpan) -> None:
    assert child.context is not None
    assert parent.context is not None
    assert child.context.trace_id == parent.context.trace_id, f"{child.name} not in {parent.name}'s trace"
    assert child.parent is not None, f"{child.name} has no parent"
    assert child.parent.span_id == parent.context.span_id, f"{child.name} is not a child of {parent.name}"


def _run_chain(spans: Sequence[ReadableSpan], kafka: KafkaSettings, run: str) -> list[ReadableSpan]:
    """The claim, handler and outcome spans of ``run`` (the latest attempt's), checked linked."""
    of_run = [s for s in spans if _attr(s, "slotflow.run_id") == run]
    claim = _one([s for s in of_run if s.name == f"claim {kafka.topic(JOBS_DUE)}"], f"claim of {run}")
    handler = _one([s for s in of_run if s.name.startswith("handler ")], f"handler of {run}")
    outcome = _one([s for s in of_run if s.name == f"create {kafka.topic(RUN_EVENTS)}"], f"outcome of {run}")
    assert claim.kind is SpanKind.CONSUMER
    assert claim.instrumentation_scope is not None
    assert claim.instrumentation_scope.name == "slotflow.claimer"
    assert isinstance(_attr(claim, "messaging.kafka.offset"), int)
    assert _attr(claim, "messaging.destination.name") == kafka.topic(JOBS_DUE)
    _child_of(handler, claim)
    _child_of(outcome, handler)
    assert outcome.kind is SpanKind.PRODUCER
    return [claim, handler, outcome]


async def test_a_scheduled_run_is_one_trace_from_job_due_to_run_completed(
    kafka: KafkaSettings,
    producer: Producer,
    db: Pool,
    spans: InMemorySpanExporter,
    ticker: Replica,
    start_claimer: StartClaimer,
) -> None:
    await start_claimer()
    slot = (await db_now(db)).replace(microsecond=0) + timedelta(seconds=2)
    schedules = {
        "traced-payout": "test.traced_payout",
        "traced-declined": "test.declined",
        "traced-retry": "test.flaky",
    }
    retry = RetryPolicy(base=timedelta(milliseconds=300), cap=timedelta(seconds=1), max_attempts=3)
    for schedule_id, handler_name in schedules.items():
        definition = ScheduleDefinition(
            spec=OnceSpec(at=slot), handler=handler_name, payload={"amount_cents": 1250}, retry=retry
        )
        await send(producer, kafka, CreateSchedule(schedule_id=schedule_id, definition=definition))
    paid, declined, retried = (run_id(s, slot) for s in schedules)
    await wait_state(db, paid, "completed", timeout=60)
    await wait_state(db, declined, "dead_lettered", timeout=60)
    await wait_state(db, retried, "completed", timeout=60)
    finished = spans.get_finished_spans()

    job_due = _one(
        [
            s
            for s in finished
            if s.name == f"create {kafka.topic(JOBS_DUE)}" and _attr(s, "slotflow.run_id") == paid
        ],
        "JobDue",
    )
    assert job_due.instrumentation_scope is not None
    assert job_due.instrumentation_scope.name == "slotflow.ticker"
    assert job_due.kind is SpanKind.PRODUCER
    assert job_due.parent is None  # the run's trace begins at its JobDue
    assert _attr(job_due, "slotflow.schedule_id") == "traced-payout"
    assert _attr(job_due, "slotflow.slot") == slot.isoformat()
    assert _attr(job_due, "slotflow.attempt") == 1
    claim, handler, completed = _run_chain(finished, kafka, paid)
    _child_of(claim, job_due)
    assert handler.name == "handler test.traced_payout"
    assert handler.status.status_code is not StatusCode.ERROR
    assert _attr(completed, "slotflow.message.type") == "RunCompleted"
    assert job_due.context is not None
    in_trace = sorted(
        s.name for s in finished if s.context is not None and s.context.trace_id == job_due.context.trace_id
    )
    assert in_trace == sorted([job_due.name, claim.name, handler.name, completed.name])

    # A failing handler: its error on the handler's span, RunFailed below it, still one trace.
    failed_claim, failed_handler, failed = _run_chain(finished, kafka, declined)
    assert failed_handler.status.status_code is StatusCode.ERROR
    assert failed_handler.status.description == "PermanentError"
    assert [e.name for e in failed_handler.events] == ["exception"]
    assert _attr(failed, "slotflow.message.type") == "RunFailed"
    assert _attr(failed, "slotflow.outcome") == "failed"
    failed_due = _one(
        [s for s in finished if s.name == job_due.name and _attr(s, "slotflow.run_id") == declined], "JobDue"
    )
    _child_of(failed_claim, failed_due)
    # A retry attempt, fired by the ticker's durable timer, continues the run's trace: its JobDue
    # hangs below the failed attempt's outcome (the StartTimer's context, kept with the timer).
    of_retried = [s for s in finished if _attr(s, "slotflow.run_id") == retried]
    dues = sorted(
        (s for s in of_retried if s.name == job_due.name), key=lambda s: str(_attr(s, "slotflow.attempt"))
    )
    assert [_attr(s, "slotflow.attempt") for s in dues] == [1, 2]
    first_failed = _one(
        [s for s in of_retried if _attr(s, "slotflow.outcome") == "failed"], "the first attempt's RunFailed"
    )
    _child_of(dues[1], first_failed)
    second_claim = _one(
        [s for s in of_retried if s.name.startswith("claim ") and _attr(s, "slotflow.attempt") == 2],
        "claim 2",
    )
    _child_of(second_claim, dues[1])
    assert dues[0].context is not None
    assert {s.context.trace_id for s in of_retried if s.context is not None} == {dues[0].context.trace_id}
    assert {s.name.split()[0] for s in of_retried} == {"create", "claim", "handler"}
    assert len(of_retried) == 8  # per attempt: JobDue, claim, handler, outcome

    # No payload or result ever becomes an attribute.
    for span in finished:
        assert 1250 not in (span.attributes or {}).values()


async def test_a_workflow_is_one_trace_through_its_activities(
    kafka: KafkaSettings,
    spans: InMemorySpanExporter,
    workflows: Workflows,
    ticker: Replica,
    sandbox: Sandbox,  # noqa: F811 - the example's sandbox fixture
) -> None:
    start = StartWorkflow(workflow_id="order-traced", workflow_type=WORKFLOW_TYPE, input=order("t"))
    await workflows.send(start, "start-order-traced")
    events = await workflows.wait("order-traced", "workflow.completed")
    scheduled = [e for e in events if isinstance(e, ActivityScheduled)]
    assert [e.activity for e in scheduled] == ["payments.authorize", "inventory.reserve", "payments.capture"]
    trace_id, root_id = tracing.workflow_ids("order-traced", "start-order-traced")
    outcome_topic = f"create {kafka.topic(RUN_EVENTS)}"

    def last_outcome_recorded() -> bool:
        last = scheduled[-1].run_id
        return any(
            s.name == outcome_topic and _attr(s, "slotflow.run_id") == last
            for s in spans.get_finished_spans()
        )

    await assert_eventually(last_outcome_recorded, timeout=30)
    finished = spans.get_finished_spans()
    root = _one([s for s in finished if s.name == f"workflow {WORKFLOW_TYPE}"], "workflow root")
    assert root.context is not None
    assert (root.context.trace_id, root.context.span_id) == (trace_id, root_id)
    assert root.parent is None
    assert _attr(root, "slotflow.workflow_id") == "order-traced"
    decisions = [s for s in finished if s.name == f"decide {WORKFLOW_TYPE}"]
    assert len(decisions) >= len(scheduled) + 1  # the start, and one per activity's outcome at least
    for decision in decisions:
        _child_of(decision, root)
    decided = {d.context.span_id: d for d in decisions if d.context is not None}
    for activity in scheduled:
        of_run = [s for s in finished if _attr(s, "slotflow.run_id") == activity.run_id]
        job_due = _one(
            [s for s in of_run if s.name == f"create {kafka.topic(JOBS_DUE)}"], f"JobDue of {activity.run_id}"
        )
        assert job_due.instrumentation_scope is not None
        assert job_due.instrumentation_scope.name == "slotflow.orchestrator"
        assert job_due.parent is not None
        assert job_due.parent.span_id in decided, f"the JobDue of {activity.run_id} is not a decision's"
        assert _attr(job_due, "slotflow.workflow_id") == "order-traced"
        claim, handler, completed = _run_chain(finished, kafka, activity.run_id)
        _child_of(claim, job_due)
        assert handler.name == f"handler {activity.activity}"
        assert _attr(completed, "slotflow.message.type") == "RunCompleted"
        assert completed.context is not None
        assert completed.context.trace_id == trace_id
    # Every span naming the workflow is in its one trace.
    for span in finished:
        if _attr(span, "slotflow.workflow_id") == "order-traced":
            assert span.context is not None
            assert span.context.trace_id == trace_id, span.name

    # The command's trace and the workflow's lead to each other: the root links to the
    # StartWorkflow's creation, and the intake's span that took the command links to the root.
    command = _one(
        [
            s
            for s in finished
            if s.name == f"create {kafka.topic(WORKFLOW_COMMANDS)}"
            and _attr(s, "messaging.message.id") == "start-order-traced"
        ],
        "the StartWorkflow's creation",
    )
    assert command.context is not None
    assert command.context.trace_id != trace_id
    assert _linked(root) == {(command.context.trace_id, command.context.span_id)}
    taken = _one(
        [
            s
            for s in finished
            if s.name == f"process {kafka.topic(WORKFLOW_COMMANDS)}"
            and s.context is not None
            and s.context.trace_id == command.context.trace_id
        ],
        "the intake's span of the StartWorkflow",
    )
    assert (trace_id, root_id) in _linked(taken)
    # Each decision links to the inputs it took: the first to the command, a later one to each
    # activity's outcome (the claimer's RunCompleted), so the trace says what moved the workflow.
    linked = {pair for decision in decisions for pair in _linked(decision)}
    assert (command.context.trace_id, command.context.span_id) in linked
    for activity in scheduled:
        completed = _one(
            [
                s
                for s in finished
                if s.name == outcome_topic
                and _attr(s, "slotflow.run_id") == activity.run_id
                and _attr(s, "slotflow.message.type") == "RunCompleted"
            ],
            f"the RunCompleted of {activity.run_id}",
        )
        assert completed.context is not None
        assert (completed.context.trace_id, completed.context.span_id) in linked, activity.activity


def _linked(span: ReadableSpan) -> set[tuple[int, int]]:
    """The (trace id, span id) of every span ``span`` links to."""
    return {(link.context.trace_id, link.context.span_id) for link in span.links}
