"""Large payloads by reference: no size cliffs on a 1 MiB topic.

A payload field of a history event (`PAYLOAD_FIELDS`: inputs, activity payloads and results, signal
payloads, ...) whose compact JSON is larger than the threshold (64 KiB by default) is stored once,
content-addressed, in a `PayloadStore`, and the event carries a reference in its place
(`{"$slotflow_payload": "sha256:<hex>", "bytes": N}`, docs/workflows-history.md). The orchestrator
calls these helpers around the pure decision step:

    events = await resolve_payloads(history, store)          # before WorkflowRuntime.replay
    decision = runtime.replay(events, now=now)
    to_append = await offload_payloads(decision.events, store)   # before appending to the topic

`slotflow.pg.payloads.PostgresPayloadStore` is the production store; `InMemoryPayloadStore` is
for tests and `WorkflowEnvironment`.
"""

import json
from collections.abc import Iterable
from typing import Any, Protocol

import pydantic_core

from slotflow.contracts.workflows import (
    PAYLOAD_FIELDS,
    PAYLOAD_REF_KEY,
    HistoryEvent,
    content_ref,
    is_payload_ref,
    payload_ref,
)
from slotflow.errors import PayloadNotFound

#: Payloads larger than this (bytes of compact JSON) travel by reference.
DEFAULT_THRESHOLD = 64 * 1024


class PayloadStore(Protocol):
    """Content-addressed bytes: `put` is idempotent and returns `"sha256:<hex>"` of the bytes."""

    async def put(self, data: bytes) -> str: ...

    async def get(self, ref: str) -> bytes:
        """The bytes stored under ``ref``.

        Raises:
            PayloadNotFound: nothing is stored under ``ref``.
        """
        ...


class InMemoryPayloadStore:
    """A `PayloadStore` in a dict (tests, `WorkflowEnvironment`)."""

    def __init__(self) -> None:
        self.payloads: dict[str, bytes] = {}

    async def put(self, data: bytes) -> str:
        ref = content_ref(data)
        self.payloads.setdefault(ref, bytes(data))
        return ref

    async def get(self, ref: str) -> bytes:
        try:
            return self.payloads[ref]
        except KeyError:
            raise PayloadNotFound(f"no payload {ref}") from None


def encode(value: Any) -> bytes:
    """The compact JSON the size threshold is measured on and the store keeps."""
    return pydantic_core.to_json(value)


async def offload_value(value: Any, store: PayloadStore, *, threshold: int = DEFAULT_THRESHOLD) -> Any:
    """``value``, or a reference to it in ``store`` when its JSON is larger than ``threshold``."""
    if is_payload_ref(value):
        return value
    data = encode(value)
    if len(data) <= threshold:
        return value
    return payload_ref(await store.put(data), len(data))


async def resolve_value(value: Any, store: PayloadStore) -> Any:
    """The payload a reference stands for (anything else as it is).

    Raises:
        PayloadNotFound: the store has nothing under the reference.
    """
    if not is_payload_ref(value):
        return value
    return json.loads(await store.get(value[PAYLOAD_REF_KEY]))


async def offload_payloads(
    events: Iterable[HistoryEvent], store: PayloadStore, *, threshold: int = DEFAULT_THRESHOLD
) -> list[HistoryEvent]:
    """``events`` with every payload field above ``threshold`` replaced by its reference."""
    out: list[HistoryEvent] = []
    for event in events:
        changes: dict[str, Any] = {}
        for name in PAYLOAD_FIELDS.get(type(event), ()):
            value = getattr(event, name)
            replaced = await offload_value(value, store, threshold=threshold)
            if replaced is not value:
                changes[name] = replaced
        out.append(event.model_copy(update=changes) if changes else event)
    return out


async def resolve_payloads(events: Iterable[HistoryEvent], store: PayloadStore) -> list[HistoryEvent]:
    """``events`` with every payload reference replaced by the payload (each ref fetched once).

    Raises:
        PayloadNotFound: a referenced payload is not in ``store``.
    """
    fetched: dict[str, Any] = {}
    out: list[HistoryEvent] = []
    for event in events:
        changes: dict[str, Any] = {}
        for name in PAYLOAD_FIELDS.get(type(event), ()):
            value = getattr(event, name)
            if is_payload_ref(value):
                ref = value[PAYLOAD_REF_KEY]
                if ref not in fetched:
                    fetched[ref] = json.loads(await store.get(ref))
                changes[name] = fetched[ref]
        out.append(event.model_copy(update=changes) if changes else event)
    return out
