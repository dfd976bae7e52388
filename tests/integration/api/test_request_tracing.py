"""The api's requests in traces, on the real broker and database: a request is a SERVER span that
continues its caller's W3C context, and the command it publishes is that span's child, so an HTTP
command is one trace from the request to whatever consumes the record; the probes and the metrics
scrape are never traced (a kubelet asking every few seconds would fill the backend with nothing)."""

from collections.abc import Iterator

import httpx
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from slotflow import tracing
from slotflow.contracts.topics import SCHEDULE_COMMANDS, TopicSpec
from slotflow.kafka.consumer import Consumer
from slotflow.kafka.records import Record
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually, unique_name
from slotflow.testing.spans import recorded_spans
from slotflow.testing.topics import first_reads

DEFINITION = {"spec": {"kind": "cron", "expression": "*/5 * * * *"}, "handler": "h.x"}
CALLER_TRACE = "ab" * 16
CALLER_SPAN = "cd" * 8


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    with recorded_spans() as exporter:
        yield exporter


def servers(spans: InMemorySpanExporter) -> list[ReadableSpan]:
    return [s for s in spans.get_finished_spans() if s.kind is SpanKind.SERVER]


async def test_a_command_request_is_one_trace_and_the_probes_are_not_traced(
    spans: InMemorySpanExporter, client: httpx.AsyncClient, kafka: KafkaSettings
) -> None:
    for probe in ("/healthz", "/readyz", "/metrics"):
        assert (await client.get(probe)).status_code == 200, probe
    assert servers(spans) == []

    response = await client.post(
        "/v1/schedules",
        json={"schedule_id": "traced", "definition": DEFINITION},
        headers={"traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"},
    )
    assert response.status_code == 202, response.text
    (request,) = servers(spans)
    assert request.name == "POST /v1/schedules"
    assert request.instrumentation_scope is not None
    assert request.instrumentation_scope.name == "slotflow.api"
    attributes = dict(request.attributes or {})
    assert attributes["http.route"] == "/v1/schedules"
    assert attributes["http.response.status_code"] == 202
    assert request.parent is not None
    assert (request.parent.trace_id, request.parent.span_id) == (int(CALLER_TRACE, 16), int(CALLER_SPAN, 16))
    assert request.context is not None

    created = [
        s
        for s in spans.get_finished_spans()
        if s.name == f"create {kafka.topic(SCHEDULE_COMMANDS)}" and s.kind is SpanKind.PRODUCER
    ]
    assert len(created) == 1
    assert created[0].parent is not None
    assert created[0].parent.span_id == request.context.span_id
    # The record carries the request's trace to its consumer (the ticker).
    (record,) = await read_records(kafka, SCHEDULE_COMMANDS, want=1)
    carried = tracing.extract(record.headers)
    assert carried is not None
    assert trace.get_current_span(carried).get_span_context().trace_id == int(CALLER_TRACE, 16)

    lookup = await client.get("/v1/schedules/traced")
    assert lookup.status_code in (200, 404)
    names = [s.name for s in servers(spans)]
    assert names == ["POST /v1/schedules", "GET /v1/schedules/{schedule_id}"]


async def read_records(kafka: KafkaSettings, spec: TopicSpec, *, want: int) -> list[Record]:
    found: list[Record] = []
    positions: set[str] = set()
    async with Consumer(
        kafka, kafka.topic(spec), group_id=unique_name("reader"), client_id="reader"
    ) as consumer:

        async def enough() -> bool:
            found.extend(first_reads(await consumer.poll(timeout_ms=200), positions))
            return len(found) >= want

        await assert_eventually(enough, timeout=20, message=f"{want} records on {spec.name}")
    return found
