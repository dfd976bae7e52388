"""A ticker process configured only by the standard OTLP environment exports its spans over
OTLP/HTTP (to a receiver this test runs), continues the trace a command's record headers carry,
and starts a trace per JobDue: the real configuration path, exporter and protocol."""

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from slotflow.contracts import CreateSchedule, OnceSpec, ScheduleDefinition
from slotflow.contracts.topics import JOBS_DUE, SCHEDULE_COMMANDS
from slotflow.core.identity import run_id
from slotflow.kafka.producer import Producer
from slotflow.pg.pool import Pool
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from slotflow.testing.spans import recorded_spans
from tests.integration.ticker.support import db_now, send, spawn_ticker, wait_until_serving


@dataclass(frozen=True)
class Exported:
    service: str
    name: str
    kind: int
    trace_id: str
    span_id: str
    parent_span_id: str
    attributes: dict[str, Any]


class Receiver(ThreadingHTTPServer):
    """The OTLP/HTTP trace endpoint (protobuf), keeping every span it is sent."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.spans: list[Exported] = []
        self.lock = threading.Lock()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.path != "/v1/traces" or self.headers.get("Content-Type") != "application/x-protobuf":
            self.send_error(404)
            return
        request = ExportTraceServiceRequest.FromString(body)
        found = []
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    found.append(
                        Exported(
                            service=str(resource.get("service.name")),
                            name=span.name,
                            kind=span.kind,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_span_id=span.parent_span_id.hex(),
                            attributes={a.key: _value(a.value) for a in span.attributes},
                        )
                    )
        with self.server.lock:
            self.server.spans.extend(found)
        reply = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, format: str, *args: Any) -> None:
        return None


def _value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind is not None else None


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


async def test_a_ticker_process_exports_its_spans_over_otlp(
    kafka: KafkaSettings, pg_dsn: str, pg_pool: Pool, receiver: Receiver, tmp_path: Path
) -> None:
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,  # SLOTFLOW_TRACING unset: on by this alone
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }
    ticker = spawn_ticker(kafka, pg_dsn, log_dir=str(tmp_path), env=env)
    try:
        await wait_until_serving(pg_pool, ticker.ticker_id)
        slot = (await db_now(pg_pool)).replace(microsecond=0) + timedelta(seconds=2)
        definition = ScheduleDefinition(spec=OnceSpec(at=slot), handler="h", payload={"secret": "s3cr3t"})
        # The command is sent from a traced block: the ticker's span continues that trace.
        with recorded_spans("test") as local:
            async with Producer(kafka, client_id="test-traced") as producer:
                await send(producer, kafka, CreateSchedule(schedule_id="otlp", definition=definition))
        (sent,) = local.get_finished_spans()
        assert sent.context is not None
        run = run_id("otlp", slot)

        def exported() -> tuple[Exported, Exported] | None:
            with receiver.lock:
                spans = list(receiver.spans)
            processed = [s for s in spans if s.name == f"process {kafka.topic(SCHEDULE_COMMANDS)}"]
            due = [s for s in spans if s.name == f"create {kafka.topic(JOBS_DUE)}"]
            return (processed[0], due[0]) if processed and due else None

        processed, due = await assert_eventually(exported, timeout=60)
    finally:
        ticker.terminate()
    assert processed.service == "slotflow-ticker"
    assert processed.kind == 5  # SPAN_KIND_CONSUMER
    assert processed.trace_id == f"{sent.context.trace_id:032x}"
    assert processed.parent_span_id == f"{sent.context.span_id:016x}"
    assert processed.attributes["slotflow.message.type"] == "schedule.create"
    assert processed.attributes["messaging.system"] == "kafka"
    assert due.kind == 4  # SPAN_KIND_PRODUCER
    assert due.parent_span_id == ""  # a run's trace begins at its JobDue
    assert due.attributes["slotflow.run_id"] == run
    assert due.attributes["slotflow.schedule_id"] == "otlp"
    assert due.attributes["messaging.destination.name"] == kafka.topic(JOBS_DUE)
    # Identifiers only: the payload never becomes an attribute.
    with receiver.lock:
        assert all("s3cr3t" not in str(s.attributes) for s in receiver.spans)
