"""OpenTelemetry traces across the services, the W3C trace context carried in Kafka record headers.

Off by default: until `configure_tracing` (or a test's `use_provider`) installs an SDK provider,
`enabled()` is False, every tracer is the API's no-op one and the hot paths skip tracing with one
check. Turned on by `SLOTFLOW_TRACING=otlp` (or `console`), or by the standard
`OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` when `SLOTFLOW_TRACING` is
unset; `SLOTFLOW_TRACING=off` (or `OTEL_SDK_DISABLED=true`) keeps it off whatever else is set. The
SDK and the OTLP exporter are the `tracing` extra of the library (`slotflow-lib`); the API alone is
a hard dependency (docs/tracing.md).

How a context travels: a record produced directly (`Producer.send`) carries the `traceparent`
(and `tracestate`) of a producer span; an event staged in an outbox carries, in the outbox row's
headers, the context of the span that staged it, so the relay publishes it with the context of
the transaction that wrote it. A consumer (`ConsumeLoop`, the claimer's intake) extracts it and
parents its span on it.

The traces: one per run (the ticker's JobDue → the claimer's claim → the handler → RunCompleted)
and one per workflow, whose trace id is derived from the workflow id and the id of the command
that started it, so every decision of the workflow, on any orchestrator and after any restart,
joins the same trace without storing anything; its activities' runs hang below the decisions
that scheduled them.
"""

from __future__ import annotations

import contextvars
import hashlib
import logging
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.context import Context as Context
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    SpanContext,
    TraceFlags,
    Tracer,
)
from opentelemetry.trace import Span as Span
from opentelemetry.trace import SpanKind as SpanKind
from opentelemetry.trace import Status as Status
from opentelemetry.trace import StatusCode as StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from slotflow.errors import ConfigurationError

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import SpanProcessor
    from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider

log = logging.getLogger(__name__)

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
#: What `SLOTFLOW_TRACING` may say (`auto`: on when an OTLP endpoint is set).
MODES = ("auto", "off", "otlp", "console")

_PROPAGATOR = TraceContextTextMapPropagator()
_NOOP_TRACER: Tracer = trace.NoOpTracer()
#: The ids the next span must take (a workflow's root span); read by the provider's id generator.
_FORCED_IDS: contextvars.ContextVar[tuple[int, int] | None] = contextvars.ContextVar(
    "slotflow_forced_ids", default=None
)


class _State:
    provider: trace.TracerProvider | None = None
    tracers: dict[str, Tracer] = {}  # noqa: RUF012 - one process-wide cache, replaced whole


_state = _State()


def enabled() -> bool:
    """Whether spans are recorded; False costs the hot paths one call."""
    return _state.provider is not None


def tracer(scope: str) -> Tracer:
    """The tracer of one instrumentation scope (`slotflow.ticker`, ...); no-op while disabled."""
    provider = _state.provider
    if provider is None:
        return _NOOP_TRACER
    found = _state.tracers.get(scope)
    if found is None:
        found = _state.tracers[scope] = provider.get_tracer(scope)
    return found


def use_provider(provider: trace.TracerProvider | None) -> None:
    """Record with ``provider`` from now on (None: tracing off). Tests pass one built by
    `make_provider` with an in-memory exporter; services call `configure_tracing`."""
    _state.provider = provider
    _state.tracers = {}


def make_provider(service_name: str, *processors: SpanProcessor) -> SdkTracerProvider:
    """An SDK provider for ``service_name`` (`OTEL_SERVICE_NAME` wins) with slotflow's id generator.

    The sampler is the SDK's (`OTEL_TRACES_SAMPLER`, `OTEL_TRACES_SAMPLER_ARG`).

    Raises:
        ConfigurationError: the SDK is not installed (the `tracing` extra).
    """
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider as SdkProvider
    except ImportError as err:
        raise ConfigurationError(
            "tracing needs the OpenTelemetry SDK: install the library's `tracing` extra (`slotflow-lib[tracing]`)"
        ) from err
    name = os.environ.get("OTEL_SERVICE_NAME") or service_name
    provider = SdkProvider(resource=Resource.create({"service.name": name}), id_generator=_id_generator())
    for processor in processors:
        provider.add_span_processor(processor)
    return provider


def configure_tracing(service_name: str, environ: Mapping[str, str] | None = None) -> bool:
    """Set up tracing for a service process from its environment; True when it is on.

    Every service's entry point calls it once, after `configure_logging`.

    Raises:
        ConfigurationError: `SLOTFLOW_TRACING` has an unknown value, or asks for tracing while
            the SDK and exporter (the `tracing` extra) are not installed.
    """
    env = os.environ if environ is None else environ
    mode = (env.get("SLOTFLOW_TRACING") or "auto").strip().lower()
    if mode not in MODES:
        raise ConfigurationError(f"SLOTFLOW_TRACING must be one of {', '.join(MODES)}, not {mode!r}")
    if mode == "auto":
        endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        mode = "otlp" if endpoint else "off"
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        mode = "off"
    if mode == "off":
        use_provider(None)
        return False
    try:
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter

        exporter: SpanExporter
        if mode == "otlp":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            exporter = OTLPSpanExporter()  # the endpoint, headers and TLS files from OTEL_EXPORTER_OTLP_*
        else:
            exporter = ConsoleSpanExporter()
    except ImportError as err:
        raise ConfigurationError(
            f"SLOTFLOW_TRACING={mode} needs the OpenTelemetry SDK and OTLP exporter: "
            "install the library's `tracing` extra (`slotflow-lib[tracing]`)"
        ) from err
    # Batched off the event loop, flushed when the process exits (the SDK's atexit hook).
    provider = make_provider(service_name, BatchSpanProcessor(exporter))
    # Global too, so spans a handler opens with the plain OpenTelemetry API join the run's trace.
    trace.set_tracer_provider(provider)
    use_provider(provider)
    log.info("tracing on: %s spans of %s", mode, service_name)
    return True


# -- carrying the context -------------------------------------------------------------------------


def extract(headers: Iterable[tuple[str, bytes]] | Mapping[str, bytes] | None) -> Context | None:
    """The trace context a record's headers carry, or None (none, or not a valid traceparent)."""
    if not headers:
        return None
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    carrier: dict[str, str] = {}
    for key, value in pairs:
        if key in (TRACEPARENT, TRACESTATE):
            carrier[key] = value.decode("latin-1")
    if TRACEPARENT not in carrier:
        return None
    context = _PROPAGATOR.extract(carrier)
    if not trace.get_current_span(context).get_span_context().is_valid:
        return None
    return context


#: A W3C traceparent as a header carries it: version, trace id, parent span id, flags, lower-case
#: hex. Nothing else of a header is stored (`storable_traceparent`).
_TRACEPARENT_FORM = re.compile(rb"[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}")


def storable_traceparent(value: bytes | None) -> str | None:
    """A record's `traceparent` header as text to keep with what the record brought (a timer, a
    workflow input), or None unless it is a valid W3C traceparent. The header is the producer's
    to write: any client allowed on a command topic can put a NUL there (PostgreSQL text cannot
    hold one, so the insert of a whole batch would fail) or a megabyte; such a value is dropped,
    and the record is taken as if it carried no context."""
    if value is None or _TRACEPARENT_FORM.fullmatch(value) is None:
        return None
    text = value.decode("ascii")
    return text if from_traceparent(text) is not None else None


def from_traceparent(value: str | None) -> Context | None:
    """The context a stored `traceparent` names (an input's, a timer's), or None when there is
    none or it is not valid."""
    if not value:
        return None
    return extract({TRACEPARENT: value.encode("latin-1")})


def headers_for(span: Span | None = None) -> dict[str, bytes]:
    """The `traceparent` (and `tracestate`) headers of ``span`` (default: the current span);
    empty when there is no valid span."""
    target = span if span is not None else trace.get_current_span()
    if not target.get_span_context().is_valid:
        return {}
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(target))
    return {key: value.encode("latin-1") for key, value in carrier.items()}


def current_span() -> Span:
    """The current span (a non-recording one outside any span)."""
    return trace.get_current_span()


def context_of(span: Span) -> Context:
    """A context whose current span is ``span`` (a parent for spans started later)."""
    return trace.set_span_in_context(span)


# -- spans -----------------------------------------------------------------------------------------


def messaging(
    topic: str,
    *,
    operation: str,
    operation_type: str,
    message_id: str | None = None,
    key: str | bytes | None = None,
    partition: int | None = None,
    offset: int | None = None,
    group: str | None = None,
) -> dict[str, Any]:
    """The messaging.* semantic-convention attributes of a Kafka span."""
    attributes: dict[str, Any] = {
        "messaging.system": "kafka",
        "messaging.destination.name": topic,
        "messaging.operation.name": operation,
        "messaging.operation.type": operation_type,
    }
    if message_id is not None:
        attributes["messaging.message.id"] = message_id
    if key is not None:
        attributes["messaging.kafka.message.key"] = (
            key.decode("utf-8", "replace") if isinstance(key, bytes) else key
        )
    if partition is not None and partition >= 0:
        attributes["messaging.destination.partition.id"] = str(partition)
    if offset is not None and partition is not None and partition >= 0:
        attributes["messaging.kafka.offset"] = offset
    if group is not None:
        attributes["messaging.consumer.group.name"] = group
    return attributes


def run_attributes(
    *,
    run_id: str,
    job_id: str,
    slot: datetime | None = None,
    attempt: int | None = None,
    kind: str | None = None,
    handler: str | None = None,
    workflow_id: str | None = None,
) -> dict[str, Any]:
    """The slotflow.* attributes naming a run (identifiers only: never a payload or a result)."""
    attributes: dict[str, Any] = {"slotflow.run_id": run_id, "slotflow.job_id": job_id}
    if kind is not None:
        attributes["slotflow.job.kind"] = kind
        if kind != "activity":
            # A schedule's job id is the schedule id.
            attributes["slotflow.schedule_id"] = job_id
    if slot is not None:
        attributes["slotflow.slot"] = slot.isoformat()
    if attempt is not None:
        attributes["slotflow.attempt"] = attempt
    if handler is not None:
        attributes["slotflow.handler"] = handler
    if workflow_id is not None:
        attributes["slotflow.workflow_id"] = workflow_id
    return attributes


def produced(
    scope: str,
    topic: str,
    *,
    message_id: str,
    key: str | None = None,
    attributes: Mapping[str, Any] | None = None,
    parent: Context | None = None,
) -> dict[str, bytes]:
    """Record the creation of one message (a PRODUCER span `create <topic>`, under ``parent`` or
    the current context) and return the headers that carry its context; {} while disabled."""
    if _state.provider is None:
        return {}
    span = tracer(scope).start_span(
        f"create {topic}",
        context=parent,
        kind=SpanKind.PRODUCER,
        attributes={
            **messaging(topic, operation="create", operation_type="create", message_id=message_id, key=key),
            **(attributes or {}),
        },
    )
    span.end()
    return headers_for(span)


def link(context: Context, attributes: Mapping[str, Any] | None = None) -> Link:
    """A span link to ``context``'s span, with ``attributes`` saying what the linked span is."""
    return Link(trace.get_current_span(context).get_span_context(), dict(attributes or {}))


def link_current(context: Context, attributes: Mapping[str, Any] | None = None) -> None:
    """Link the current span (a consumer's `process` span, say) to ``context``'s span, once it is
    known which other trace the message it handles leads to; nothing while tracing is off."""
    if _state.provider is None:
        return
    trace.get_current_span().add_link(
        trace.get_current_span(context).get_span_context(), dict(attributes or {})
    )


def _links(links: Iterable[Context | Link]) -> list[Link]:
    return [item if isinstance(item, Link) else link(item) for item in links]


def record_error(span: Span, error: BaseException) -> None:
    """Mark ``span`` failed with ``error`` (its type and message; the SDK adds the traceback)."""
    span.record_exception(error)
    span.set_status(Status(StatusCode.ERROR, type(error).__name__))


@contextmanager
def span(
    scope: str,
    name: str,
    *,
    kind: SpanKind = SpanKind.INTERNAL,
    parent: Context | None = None,
    attributes: Mapping[str, Any] | None = None,
    links: Iterable[Context | Link] = (),
    start_time: int | None = None,
) -> Iterator[Span]:
    """A current span for the block; an exception escaping the block is recorded on it.

    ``links`` are contexts of related messages (a batch's records, a decision's inputs), kept as
    span links (a `link` carries attributes saying what the linked span is).
    """
    with tracer(scope).start_as_current_span(
        name,
        context=parent,
        kind=kind,
        attributes=dict(attributes or {}),
        links=_links(links),
        start_time=start_time,
        record_exception=False,
        set_status_on_exception=False,
    ) as current:
        try:
            yield current
        except BaseException as error:
            record_error(current, error)
            raise


# -- workflows -------------------------------------------------------------------------------------


def workflow_ids(workflow_id: str, start_command_id: str) -> tuple[int, int]:
    """The (trace id, root span id) of one run of a workflow: derived, so every orchestrator that
    ever decides for it finds the same trace without storing a context."""
    digest = hashlib.sha256(f"slotflow-workflow\0{workflow_id}\0{start_command_id}".encode()).digest()
    # Never zero: the all-zero ids are invalid in W3C trace context.
    trace_id = int.from_bytes(digest[:16], "big") or 1
    span_id = int.from_bytes(digest[16:24], "big") or 1
    return trace_id, span_id


def workflow_context(workflow_id: str, start_command_id: str) -> Context:
    """The context of a workflow run's root span, as a parent for its decisions."""
    trace_id, span_id = workflow_ids(workflow_id, start_command_id)
    root = SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED))
    return trace.set_span_in_context(NonRecordingSpan(root))


def workflow_started(
    scope: str,
    name: str,
    workflow_id: str,
    start_command_id: str,
    *,
    attributes: Mapping[str, Any] | None = None,
    start_time: int | None = None,
    links: Iterable[Context | Link] = (),
) -> None:
    """Record a workflow run's root span (``name``) with its derived ids; ``links``: the
    StartWorkflow command's context, so the run's trace leads back to the command's (the API
    request, the CLI call, the parent workflow's decision that sent it)."""
    if _state.provider is None:
        return
    token = _FORCED_IDS.set(workflow_ids(workflow_id, start_command_id))
    try:
        root = tracer(scope).start_span(
            name,
            context=Context(),  # a root: its trace id is the derived one, never a caller's
            attributes=dict(attributes or {}),
            start_time=start_time,
            links=_links(links),
        )
    finally:
        _FORCED_IDS.reset(token)
    root.end()


def _id_generator() -> Any:
    """The SDK's random ids, except for a workflow's root span (`workflow_started`)."""
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

    class _Ids(RandomIdGenerator):
        def generate_trace_id(self) -> int:
            forced = _FORCED_IDS.get()
            return forced[0] if forced is not None else super().generate_trace_id()

        def generate_span_id(self) -> int:
            forced = _FORCED_IDS.get()
            return forced[1] if forced is not None else super().generate_span_id()

    return _Ids()
