"""Recording spans in a test: slotflow's tracing on, every finished span kept in memory.

Needs the OpenTelemetry SDK (the `tracing` extra).
"""

from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from slotflow import tracing


@contextmanager
def recorded_spans(service_name: str = "slotflow-test") -> Iterator[InMemorySpanExporter]:
    """Turn tracing on for the block; ``exporter.get_finished_spans()`` lists what ended so far.

    Synchronous export (no batching), so a span is there as soon as it ends. Tracing is off again
    after the block.
    """
    exporter = InMemorySpanExporter()
    provider = tracing.make_provider(service_name, SimpleSpanProcessor(exporter))
    tracing.use_provider(provider)
    try:
        yield exporter
    finally:
        tracing.use_provider(None)
        provider.shutdown()
