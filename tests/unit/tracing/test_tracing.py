"""slotflow.tracing: off by default, the W3C context through headers and outbox rows, spans and
their parents, the workflow trace's derived ids, ConsumeLoop's consumer spans (in-memory spans)."""

import asyncio
import json
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import cast

import pytest
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from slotflow import tracing
from slotflow.contracts import JobDue, wrap
from slotflow.errors import ConfigurationError, PermanentError
from slotflow.kafka.consumer import Consumer
from slotflow.kafka.loop import Incoming
from slotflow.kafka.producer import _traced
from slotflow.kafka.records import Record
from slotflow.pg.outbox import Encoded, Staged, encoded, traced, with_headers
from slotflow.testing.spans import recorded_spans
from tests.unit.kafka.test_loop import FakeProducer, good, make_loop

AT = datetime(2026, 12, 2, 2, 0, tzinfo=UTC)


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    with recorded_spans("unit") as exporter:
        yield exporter


def _staged() -> Staged:
    job = JobDue(run_id="j@1", job_id="j", slot=AT, handler="h")
    return Staged("jobs", wrap(job, id="j@1", key="j", source="s", occurred_at=AT))


def test_tracing_is_off_by_default_and_adds_nothing() -> None:
    assert not tracing.enabled()
    assert tracing.configure_tracing("unit", environ={}) is False
    assert not tracing.enabled()
    assert tracing.produced("s", "jobs", message_id="m") == {}
    assert tracing.headers_for() == {}
    assert "traceparent" not in json.loads(encoded(_staged()).headers)
    envelope = _staged().envelope
    assert _traced("jobs", envelope, None) == {}
    with tracing.span("s", "nothing recorded") as span:
        assert not span.get_span_context().is_valid


@pytest.mark.parametrize(
    "environ",
    [
        {"SLOTFLOW_TRACING": "off", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"},
        {"OTEL_SDK_DISABLED": "true", "SLOTFLOW_TRACING": "otlp"},
        {"SLOTFLOW_TRACING": ""},
    ],
)
def test_off_settings_win(environ: dict[str, str]) -> None:
    assert tracing.configure_tracing("unit", environ=environ) is False
    assert not tracing.enabled()


def test_an_unknown_mode_is_refused_with_the_choices() -> None:
    with pytest.raises(ConfigurationError, match="SLOTFLOW_TRACING must be one of auto, off, otlp"):
        tracing.configure_tracing("unit", environ={"SLOTFLOW_TRACING": "jaeger"})


def test_the_context_round_trips_through_headers(spans: InMemorySpanExporter) -> None:
    with tracing.span("s", "outer") as outer:
        headers = tracing.headers_for()
    assert set(headers) == {"traceparent"}
    context = tracing.extract(list(headers.items()))
    assert context is not None
    with tracing.span("s", "inner", parent=context):
        pass
    inner = next(s for s in spans.get_finished_spans() if s.name == "inner")
    assert inner.parent is not None
    assert inner.parent.span_id == outer.get_span_context().span_id
    assert inner.context is not None
    assert inner.context.trace_id == outer.get_span_context().trace_id


@pytest.mark.parametrize(
    "headers",
    [
        None,
        [],
        [("traceparent", b"not a traceparent")],
        [("traceparent", b"00-" + b"0" * 32 + b"-" + b"0" * 16 + b"-01")],
    ],
)
def test_missing_or_broken_contexts_extract_to_none(headers: list[tuple[str, bytes]] | None) -> None:
    assert tracing.extract(headers) is None


def test_an_outbox_row_keeps_the_context_it_was_staged_in(spans: InMemorySpanExporter) -> None:
    with tracing.span("s", "transaction") as transaction:
        row = encoded(_staged())
        later = traced(_staged())
    stored = json.loads(row.headers)
    expected = f"{transaction.get_span_context().trace_id:032x}-{transaction.get_span_context().span_id:016x}"
    assert expected in stored["traceparent"]
    assert stored["slotflow-type"] == "job.due"
    assert later.headers is not None
    assert expected in later.headers["traceparent"].decode()
    # An item that brings its own context keeps it.
    own = Staged("jobs", _staged().envelope, {"traceparent": b"00-" + b"1" * 32 + b"-" + b"2" * 16 + b"-01"})
    assert traced(own) is own


def test_with_headers_adds_to_a_row_encoded_by_its_caller() -> None:
    row = Encoded("jobs", "e", "k", b"{}", json.dumps({"slotflow-type": "JobDue"}))
    assert with_headers(row, {}) is row
    added = with_headers(row, {"traceparent": b"00-abc"})
    assert json.loads(added.headers) == {"slotflow-type": "JobDue", "traceparent": "00-abc"}


def test_a_produced_message_is_a_producer_span_with_messaging_attributes(spans: InMemorySpanExporter) -> None:
    attributes = tracing.run_attributes(
        run_id="pay@1", job_id="pay", slot=AT, attempt=2, kind="scheduled", handler="h"
    )
    headers = tracing.produced(
        "slotflow.ticker", "slotflow.jobs.due", message_id="pay@1", key="pay", attributes=attributes
    )
    (span,) = spans.get_finished_spans()
    assert span.name == "create slotflow.jobs.due"
    assert span.kind is SpanKind.PRODUCER
    assert span.parent is None
    assert span.instrumentation_scope is not None
    assert span.instrumentation_scope.name == "slotflow.ticker"
    assert dict(span.attributes or {}) == {
        "messaging.system": "kafka",
        "messaging.destination.name": "slotflow.jobs.due",
        "messaging.operation.name": "create",
        "messaging.operation.type": "create",
        "messaging.message.id": "pay@1",
        "messaging.kafka.message.key": "pay",
        "slotflow.run_id": "pay@1",
        "slotflow.job_id": "pay",
        "slotflow.schedule_id": "pay",
        "slotflow.job.kind": "scheduled",
        "slotflow.slot": AT.isoformat(),
        "slotflow.attempt": 2,
        "slotflow.handler": "h",
    }
    assert span.context is not None
    assert (
        headers["traceparent"].decode()[:-3] == f"00-{span.context.trace_id:032x}-{span.context.span_id:016x}"
    )


def test_a_direct_send_gets_a_producer_span_unless_it_brings_a_context(spans: InMemorySpanExporter) -> None:
    envelope = _staged().envelope
    created = _traced("jobs", envelope, {"x": b"1"})
    assert created["x"] == b"1"
    assert "traceparent" in created
    (span,) = spans.get_finished_spans()
    assert span.name == "create jobs"
    assert span.kind is SpanKind.PRODUCER
    own = {"traceparent": b"00-" + b"1" * 32 + b"-" + b"2" * 16 + b"-01"}
    assert _traced("jobs", envelope, own) == own
    assert len(spans.get_finished_spans()) == 1


def test_an_error_escaping_a_span_is_recorded(spans: InMemorySpanExporter) -> None:
    with pytest.raises(PermanentError), tracing.span("s", "fails"):
        raise PermanentError("card declined")
    (span,) = spans.get_finished_spans()
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == "PermanentError"
    assert [e.name for e in span.events] == ["exception"]


def test_a_workflow_trace_has_derived_ids_and_its_decisions_hang_below_the_root(
    spans: InMemorySpanExporter,
) -> None:
    trace_id, span_id = tracing.workflow_ids("order-1", "cmd-1")
    assert (trace_id, span_id) == tracing.workflow_ids("order-1", "cmd-1")
    assert tracing.workflow_ids("order-1", "cmd-2")[0] != trace_id  # a reused id: a new trace
    tracing.workflow_started(
        "s", "workflow orders", "order-1", "cmd-1", attributes={"slotflow.workflow_id": "order-1"}
    )
    with tracing.span("s", "decide", parent=tracing.workflow_context("order-1", "cmd-1")):
        pass
    with tracing.span("s", "unrelated root", parent=Context()):
        pass
    decide, unrelated, root = sorted(spans.get_finished_spans(), key=lambda s: s.name)
    assert root.context is not None
    assert decide.context is not None
    assert unrelated.context is not None
    assert (root.context.trace_id, root.context.span_id) == (trace_id, span_id)
    assert root.parent is None
    assert decide.context.trace_id == trace_id
    assert decide.parent is not None
    assert decide.parent.span_id == span_id
    # Only the root takes the derived ids: other spans keep random ones.
    assert unrelated.context.span_id != span_id


def _record(offset: int, headers: dict[str, bytes]) -> Record:
    base = good(offset)
    return Record(base.topic, base.partition, base.offset, base.key, base.value, tuple(headers.items()), None)


async def test_consume_loop_spans_continue_the_producers_trace_and_record_dead_letters(
    spans: InMemorySpanExporter,
) -> None:
    sent = tracing.produced("s", "t", message_id="m")
    handled: list[str] = []

    async def handler(incoming: Incoming) -> None:
        handled.append(tracing.headers_for()["traceparent"].decode())
        if incoming.record.offset == 1:
            raise PermanentError("no such merchant")

    loop, consumer, stop, _ = make_loop([[_record(0, sent), _record(1, {})]], handler, FakeProducer())
    consumer.group_id = "g"  # type: ignore[attr-defined]
    await loop.run(stop)
    finished = {s.name: s for s in spans.get_finished_spans()}
    producer = finished["create t"]
    processed = [s for s in spans.get_finished_spans() if s.name == "process t"]
    assert len(processed) == 2
    first, second = processed
    assert first.kind is SpanKind.CONSUMER
    assert producer.context is not None
    assert first.context is not None
    assert first.context.trace_id == producer.context.trace_id
    assert first.parent is not None
    assert first.parent.span_id == producer.context.span_id
    assert (first.attributes or {})["messaging.consumer.group.name"] == "g"
    assert (first.attributes or {})["messaging.kafka.offset"] == 0
    # What the handler staged would carry the consumer span's context.
    assert f"{first.context.span_id:016x}" in handled[0]
    assert second.parent is None
    assert second.status.status_code is StatusCode.ERROR
    assert (second.attributes or {})["slotflow.dlq.reason"] == "permanent_error"
    assert isinstance(cast(Consumer, consumer), object)
    assert asyncio.iscoroutinefunction(handler)


async def test_a_batch_span_links_every_records_context_and_a_batch_of_one_continues_it(
    spans: InMemorySpanExporter,
) -> None:
    one = tracing.produced("s", "t", message_id="1")
    two = tracing.produced("s", "t", message_id="2")

    async def handler(incoming: Incoming) -> None:
        return None

    async def batch(goods: list[Incoming]) -> None:
        return None

    batches = [[_record(0, one), _record(1, two), _record(2, {})], [_record(3, one)]]
    loop, consumer, stop, _ = make_loop(batches, handler, FakeProducer(), batch_handler=batch)
    consumer.group_id = "g"  # type: ignore[attr-defined]
    await loop.run(stop)
    created = {
        (s.attributes or {})["messaging.message.id"]: s
        for s in spans.get_finished_spans()
        if s.name == "create t"
    }
    linked, single = [s for s in spans.get_finished_spans() if s.name == "process t"]
    assert (linked.attributes or {})["messaging.batch.message_count"] == 3
    assert linked.parent is None
    ids = {key: _span_id(span) for key, span in created.items()}
    assert [link.context.span_id for link in linked.links] == [ids["1"], ids["2"]]
    assert single.parent is not None
    assert single.parent.span_id == ids["1"]


def _span_id(span: ReadableSpan) -> int:
    assert span.context is not None
    return int(span.context.span_id)


def test_asking_for_otlp_without_the_exporter_stops_with_the_extra_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # None in sys.modules makes the import fail, as if the `tracing` extra were not installed.
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.http.trace_exporter", None)
    with pytest.raises(ConfigurationError, match=r"SLOTFLOW_TRACING=otlp needs .* `tracing` extra"):
        tracing.configure_tracing("unit", environ={"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"})
    assert not tracing.enabled()


@pytest.mark.parametrize(
    ("header", "kept"),
    [
        (b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", True),
        (None, False),
        (b"", False),
        (b"\x00", False),
        (b"00-" + b"\x00" * 32 + b"-" + b"\x00" * 16 + b"-01", False),
        # All-zero ids are no context (W3C), upper-case hex is not the header's form, nor is a tail.
        (b"00-00000000000000000000000000000000-00f067aa0ba902b7-01", False),
        (b"00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01", False),
        (b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" + b"\xff" * 600, False),
        (b"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", False),
    ],
)
def test_only_a_valid_traceparent_is_storable(header: bytes | None, kept: bool) -> None:
    stored = tracing.storable_traceparent(header)
    assert stored == (header.decode() if kept and header else None)
