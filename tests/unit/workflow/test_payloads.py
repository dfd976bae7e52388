"""Payloads above the threshold travel by reference and come back whole; replay is unchanged."""

from typing import Any

import pytest

from slotflow import workflow
from slotflow.contracts.codec import encode
from slotflow.contracts.envelope import wrap
from slotflow.contracts.workflows import ActivityCompleted, ActivityScheduled, content_ref, is_payload_ref
from slotflow.errors import PayloadNotFound
from slotflow.workflow.payloads import (
    DEFAULT_THRESHOLD,
    InMemoryPayloadStore,
    offload_payloads,
    offload_value,
    resolve_payloads,
    resolve_value,
)
from slotflow.workflow.runtime import WorkflowRuntime
from tests.unit.workflow.helpers import T0, History

BIG = {"rows": ["x" * 1000] * 5000}  # about 5 MB of JSON


@workflow.defn(name="reports.big")
class BigReport:
    @workflow.run
    async def run(self) -> dict[str, Any]:
        report = await workflow.execute_activity("reports.build")
        await workflow.execute_activity("reports.mail", report)
        return {"rows": len(report["rows"])}


async def test_a_5mb_activity_result_is_stored_once_and_referenced() -> None:
    store = InMemoryPayloadStore()
    runtime = WorkflowRuntime([BigReport])
    history = History(runtime, "reports.big")
    history.replay()
    history.complete(2, BIG)
    # The orchestrator appends the result by reference: the record stays far under 1 MiB.
    stored = await offload_payloads(history.events, store)
    result = stored[2]
    assert isinstance(result, ActivityCompleted)
    assert is_payload_ref(result.result)
    assert result.result["bytes"] > 5_000_000
    record = encode(wrap(result, id="wf-1#3", key="wf-1", source="test", occurred_at=T0))
    assert len(record) < 1000
    assert len(store.payloads) == 1
    # Before deciding it resolves them; the code sees the whole result and decides as ever.
    resolved = await resolve_payloads(stored, store)
    assert resolved == history.events
    decision = runtime.replay(resolved, now=T0)
    (mail,) = decision.events
    assert isinstance(mail, ActivityScheduled)
    assert mail.payload == BIG
    # The new decision's payload is offloaded too, to the same stored bytes.
    (offloaded,) = await offload_payloads(decision.events, store)
    assert is_payload_ref(offloaded.payload)  # type: ignore[attr-defined]
    assert len(store.payloads) == 1


async def test_small_payloads_stay_inline_and_the_threshold_is_configurable() -> None:
    store = InMemoryPayloadStore()
    small = {"a": "b" * 100}
    assert await offload_value(small, store) is small
    ref = await offload_value(small, store, threshold=10)
    assert is_payload_ref(ref)
    assert await resolve_value(ref, store) == small
    assert DEFAULT_THRESHOLD == 64 * 1024


async def test_a_missing_payload_is_a_clear_error() -> None:
    store = InMemoryPayloadStore()
    ref = {"$slotflow_payload": content_ref(b"{}"), "bytes": 2}
    with pytest.raises(PayloadNotFound, match="no payload sha256:"):
        await resolve_value(ref, store)


async def test_the_environment_keeps_large_payloads_by_reference() -> None:
    from slotflow.runs import RunContext
    from slotflow.workflow.testing import WorkflowEnvironment

    async def build(ctx: RunContext) -> dict[str, Any]:
        return BIG

    async def mail(ctx: RunContext) -> None:
        assert ctx.payload == BIG  # the activity gets the whole value back

    store = InMemoryPayloadStore()
    async with WorkflowEnvironment(
        [BigReport],
        activities={"reports.build": build, "reports.mail": mail},
        payload_store=store,
        replay_every_step=True,
    ) as env:
        handle = await env.start_workflow(BigReport, id="r-1")
        assert await handle.result() == {"rows": 5000}
        stored = env.history("r-1")
        assert is_payload_ref(stored[2].result)  # type: ignore[attr-defined]
        assert is_payload_ref(stored[3].payload)  # type: ignore[attr-defined]
        assert handle.history[2].result == BIG  # type: ignore[attr-defined]
        assert len(store.payloads) == 1
