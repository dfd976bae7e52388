"""A `traceparent` header is whatever the record's producer wrote: with tracing on, the orchestrator
keeps it with the input so the decision can link to it, and the ticker keeps a StartTimer's with
its timer. Only a valid W3C traceparent is kept; anything else (a NUL, which PostgreSQL text cannot
hold; a megabyte of junk) is dropped, and the command is taken as if it carried none.
Real broker, real database, tracing recorded in memory.
"""

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from slotflow.contracts import SignalWorkflow, StartWorkflow
from slotflow.contracts.codec import encode
from slotflow.contracts.envelope import envelope_headers
from slotflow.contracts.routing import build_command
from slotflow.kafka.producer import OutgoingRecord, Producer
from slotflow.settings import KafkaSettings
from slotflow.testing.spans import recorded_spans
from tests.integration.orchestrator.support import Workflows

VALID_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
VALID_SPAN = "00f067aa0ba902b7"
HOSTILE = (
    b"00-" + b"\x00" * 32 + b"-" + b"\x00" * 16 + b"-01",
    b"\x00",
    b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" + b"\xff" * 1000,
)


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    with recorded_spans() as exporter:
        yield exporter


async def send_with_traceparent(
    kafka: KafkaSettings,
    producer: Producer,
    message: StartWorkflow | SignalWorkflow,
    command_id: str,
    value: bytes,
) -> None:
    spec, envelope = build_command(message, command_id=command_id, source="test")
    headers = {**envelope_headers(envelope), "traceparent": value}
    await producer.send_raw_many(
        [OutgoingRecord(kafka.topic(spec), envelope.key.encode(), encode(envelope), headers)]
    )


async def test_a_hostile_traceparent_is_dropped_and_a_valid_one_linked(
    kafka: KafkaSettings, producer: Producer, workflows: Workflows, spans: InMemorySpanExporter
) -> None:
    for index, value in enumerate(HOSTILE):
        workflow_id = f"hostile-trace-{index}"
        start = StartWorkflow(
            workflow_id=workflow_id, workflow_type="tests.approval", input={"order_id": workflow_id}
        )
        await send_with_traceparent(kafka, producer, start, f"start-{workflow_id}", value)
    for index in range(len(HOSTILE)):
        workflow_id = f"hostile-trace-{index}"
        await workflows.wait(workflow_id, "workflow.started")
        # The signal's record carries a valid context: its decision links to it.
        signal = SignalWorkflow(workflow_id=workflow_id, signal="approve", payload={"by": "ops"})
        valid = f"00-{VALID_TRACE}-{VALID_SPAN}-01".encode()
        await send_with_traceparent(kafka, producer, signal, f"signal-{workflow_id}", valid)
        await workflows.wait(workflow_id, "workflow.completed")

    decisions = [s for s in spans.get_finished_spans() if s.name == "decide tests.approval"]
    linked = {(link.context.trace_id, link.context.span_id) for d in decisions for link in d.links}
    assert (int(VALID_TRACE, 16), int(VALID_SPAN, 16)) in linked
    # Nothing links to the hostile values (none is a valid context).
    assert all(link.context.is_valid for d in decisions for link in d.links)
