"""A signal is checked against its handler's declared type when it arrives: one whose payload
does not decode is rejected with the reason (the api's `?wait=` answers 409, the CLI exits 1 and
says why, the client raises CommandRejected) and never reaches the run; the workflow carries on
and a good signal completes it. A handler that raises fails the run only after the body's saga
compensated. Real broker, database, orchestrator, claimer and api."""

import httpx
import pytest

from slotflow.client import Client, CommandRejected, HttpTransport
from slotflow.contracts import (
    ActivityScheduled,
    SignalReceived,
    SignalWorkflow,
    WorkflowCompleted,
    WorkflowFailed,
)
from tests.integration.api.conftest import CLIENT_HEADERS, TEST_TOKEN
from tests.integration.cli.conftest import Cli, api_settings, api_url, cli  # noqa: F401 - the served api
from tests.integration.orchestrator.support import Workflows

BAD = {"street": "Main 1", "zip": "ten"}
REASON = (
    "signal 'address_changed' to workflow {wf}: the payload does not fit the parameter of handler "
    "Addressed.address_changed: zip: Input should be a valid integer, unable to parse string as an integer"
)


async def test_a_signal_its_handler_cannot_take_is_rejected_wherever_it_is_sent_and_never_reaches_the_run(
    workflows: Workflows,
    api_url: str,  # noqa: F811 - the served api
    cli: Cli,  # noqa: F811 - the CLI against it
) -> None:
    await workflows.start("sig-1", "tests.addressed", {"order_id": "sig-1"}, "start-sig-1")
    await workflows.wait("sig-1", "workflow.compensation_registered")
    reason = REASON.format(wf="sig-1")

    async with httpx.AsyncClient(base_url=api_url, headers=CLIENT_HEADERS, timeout=60) as http:
        answered = await http.post(
            "/v1/workflows/sig-1/signal",
            json={"signal": "address_changed", "payload": BAD},
            params={"wait": 30},
        )
    assert answered.status_code == 409, answered.text
    assert answered.json()["detail"] == reason

    said = await cli(
        "workflow",
        "signal",
        "sig-1",
        "address_changed",
        "--payload",
        '{"street": "Main 1", "zip": "ten"}',
        "--wait",
        "30",
    )
    assert said.code == 1, said
    assert reason in said.err

    async with HttpTransport(api_url, token=TEST_TOKEN) as transport:
        client = Client(transport)
        with pytest.raises(CommandRejected) as rejected:
            await client.signal_workflow("sig-1", "address_changed", BAD, wait=30)
    assert rejected.value.reason == reason

    # None of the three reached the run; a good one completes it.
    history = await workflows.history("sig-1")
    assert not [e for e in history if isinstance(e, SignalReceived)]
    good = SignalWorkflow(
        workflow_id="sig-1", signal="address_changed", payload={"street": "Main 1", "zip": 10115}
    )
    await workflows.send(good, "good-sig-1")
    done = await workflows.wait("sig-1", "workflow.completed")
    assert isinstance(done[-1], WorkflowCompleted)
    assert done[-1].result == {"order_id": "sig-1", "zip": 10115}
    assert [e.command_id for e in done if isinstance(e, SignalReceived)] == ["good-sig-1"]


async def test_a_signal_handler_that_raises_fails_the_run_after_its_saga_compensated(
    workflows: Workflows,
) -> None:
    await workflows.start("sig-2", "tests.addressed", {"order_id": "sig-2"}, "start-sig-2")
    await workflows.wait("sig-2", "workflow.compensation_registered")
    nowhere = SignalWorkflow(
        workflow_id="sig-2", signal="address_changed", payload={"street": "Nowhere", "zip": 0}
    )
    await workflows.send(nowhere, "zero-sig-2")
    events = await workflows.wait("sig-2", "workflow.failed")
    failed = events[-1]
    assert isinstance(failed, WorkflowFailed)
    assert (failed.error_type, failed.compensated) == ("ValueError", True)
    assert failed.message == "no address has zip 0 (Nowhere)"
    undo = [e.activity for e in events if isinstance(e, ActivityScheduled) and e.compensation]
    assert undo == ["payments.void"]
    assert await workflows.effects("sig-2/") == ["payments.authorize", "payments.void"]
