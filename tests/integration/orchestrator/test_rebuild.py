"""The orchestrator's schema dropped with work in flight, rebuilt from the topics, and every
workflow finishes with each effect once (the real broker and database, a real claimer and ticker).

In flight when the schema goes: decisions committed in the table whose history never reached the
topic (the relay held off, the orchestrator killed), a saga compensating (its `inventory.release` held in flight), a
sleep and a child's sleep pending at the ticker, a child whose end was staged for its parent and
not yet applied, a signal and an activity outcome consumed (offsets committed) but not applied
(the parent's shard fenced away from the running orchestrator, as a zombie is), and an activity
outcome produced while no orchestrator runs. `slotflow-orchestrator rebuild` then restores the
schema from the topics, a new orchestrator finishes everything, and `check` finds the tables and
the topic equal; a history row removed afterwards is reported, and exits 1 on the command line.
"""

import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from slotflow.contracts import (
    ChildWorkflowCompleted,
    SignalWorkflow,
    WorkflowCompleted,
    WorkflowFailed,
    WorkflowTimerFired,
)
from slotflow.contracts.topics import WORKFLOW_COMMANDS
from slotflow.kafka.producer import Producer
from slotflow.pg.pool import Pool
from slotflow.pg.statements import sql
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from slotflow_orchestrator.intake import shard_of
from slotflow_orchestrator.rebuild import RebuildRefused, check, rebuild
from slotflow_orchestrator.workflow_code import RuntimeWorkflowCode
from tests.integration.orchestrator.conftest import WORKFLOW_MODULES, StartClaimer, StartOrchestrator
from tests.integration.orchestrator.support import Workflows, orchestrator_settings
from tests.integration.ticker.support import Replica

SAGA = ["payments.authorize", "inventory.reserve", "payments.capture"]
#: The declined capture's saga: its two steps undone newest first.
COMPENSATED = [*SAGA, "inventory.release", "payments.void"]
WAITING_INPUTS = "SELECT workflow_id, type FROM {schema}.inputs ORDER BY seq"
# The running orchestrator loses the shard as a zombie does: its next decision there is refused,
# and it does not take the shard back until the group rebalances.
# Every shard of the orchestrator's outbox held (the relay's own lock keys, `OutboxRelay`), so its
# relay publishes nothing until they are released.
HOLD_RELAY = "SELECT pg_advisory_lock(hashtext($1), s) FROM generate_series(0, 7) AS s"
RELEASE_RELAY = "SELECT pg_advisory_unlock_all()"
FENCE_AWAY = "UPDATE {schema}.shard_leases SET fence_token = fence_token + 1 WHERE shard = $1"


def _ids(prefix: str, shards: int, *, shard: int, child_elsewhere: bool = False) -> Iterator[str]:
    """Workflow ids of ``shard`` (and, asked for, whose `{id}-child` is on another shard)."""
    for n in range(10_000):
        candidate = f"{prefix}-{n}"
        if shard_of(candidate, shards) != shard:
            continue
        if child_elsewhere and shard_of(f"{candidate}-child", shards) == shard:
            continue
        yield candidate


async def _entered(db: Pool, order_id: str, activity: str) -> None:
    async def probe() -> bool:
        count = await db.fetchval(
            "SELECT count(*) FROM gates_entered WHERE order_id = $1 AND activity = $2", order_id, activity
        )
        return bool(count)

    await assert_eventually(probe, timeout=60, message=f"{activity} of {order_id} in flight")


async def _open(db: Pool, order_id: str, activity: str) -> None:
    await db.execute("INSERT INTO gates_open (order_id, activity) VALUES ($1, $2)", order_id, activity)


def _cli(command: str, kafka: KafkaSettings, pg_dsn: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "SLOTFLOW_KAFKA_BOOTSTRAP": kafka.bootstrap,
        "SLOTFLOW_KAFKA_TOPIC_NAMESPACE": kafka.topic_namespace,
        "SLOTFLOW_PG_DSN": pg_dsn,
        "SLOTFLOW_ORCHESTRATOR_WORKFLOW_MODULES": ",".join(WORKFLOW_MODULES),
    }
    return subprocess.run(
        [sys.executable, "-m", "slotflow_orchestrator", command],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


async def test_a_dropped_schema_rebuilt_from_the_topics_finishes_every_workflow_with_each_effect_once(
    kafka: KafkaSettings,
    pg_dsn: str,
    producer: Producer,
    db: Pool,
    ticker: Replica,
    workflow_code: RuntimeWorkflowCode,
    start_orchestrator_: StartOrchestrator,
    start_claimer: StartClaimer,
) -> None:
    orchestrator = await start_orchestrator_()
    await start_claimer()
    flows = Workflows(kafka, producer, db)
    shards = await producer.partition_count(kafka.topic(WORKFLOW_COMMANDS))
    fenced = shard_of("rb-approval", shards)
    approval = "rb-approval"
    compensating = next(_ids("rb-comp", shards, shard=fenced))
    parent = next(_ids("rb-parent", shards, shard=fenced, child_elsewhere=True))
    sleeping_child_parent = "rb-parent-sleeps"
    stopped_outcome = "rb-gate"
    unrelayed = "rb-unrelayed"
    sleeper = "rb-nap"

    order: dict[str, Any]
    await flows.start(
        compensating,
        "tests.checkout",
        {"order_id": compensating, "capture_fails": True, "gate": "inventory.release"},
        f"start-{compensating}",
    )
    await flows.start(approval, "tests.approval", {"order_id": approval}, f"start-{approval}")
    order = {"order_id": parent, "gate": "inventory.reserve"}
    await flows.start(parent, "tests.parent", order, f"start-{parent}")
    order = {"order_id": sleeping_child_parent, "pause_seconds": 25}
    await flows.start(sleeping_child_parent, "tests.parent", order, f"start-{sleeping_child_parent}")
    order = {"order_id": stopped_outcome, "gate": "inventory.reserve"}
    await flows.start(stopped_outcome, "tests.checkout", order, f"start-{stopped_outcome}")
    order = {"order_id": unrelayed, "gate": "inventory.reserve"}
    await flows.start(unrelayed, "tests.checkout", order, f"start-{unrelayed}")
    await flows.start(
        sleeper,
        "tests.sleeper",
        {"order_id": sleeper, "seconds": 25},
        f"start-{sleeper}",
        execution_timeout=600,
    )
    await _entered(db, compensating, "inventory.release")
    await _entered(db, parent, "inventory.reserve")
    await _entered(db, stopped_outcome, "inventory.reserve")
    await _entered(db, unrelayed, "inventory.reserve")
    await flows.wait(f"{sleeping_child_parent}-child", "workflow.timer_started")
    await flows.wait(sleeper, "workflow.timer_started")
    await flows.wait(approval, "workflow.started")

    # The fenced shard's inputs are consumed (offsets committed) and wait undecided: a signal, the
    # compensation's outcome, and the end of a child decided on another shard, staged for its parent.
    await db.execute(sql(FENCE_AWAY, "orchestrator"), fenced)
    await flows.send(
        SignalWorkflow(workflow_id=approval, signal="approve", payload={"by": "ops"}), "approve-1"
    )
    await _open(db, compensating, "inventory.release")
    await _open(db, parent, "inventory.reserve")
    await flows.wait(f"{parent}-child", "workflow.completed")

    async def undecided() -> bool:
        waiting = {(r["workflow_id"], r["type"]) for r in await db.fetch(sql(WAITING_INPUTS, "orchestrator"))}
        return {
            (approval, "workflow.signal"),
            (compensating, "run.completed"),
            (parent, "orchestrator.child_outcome"),
        } <= waiting

    await assert_eventually(undecided, timeout=60, message="the fenced shard's inputs waiting undecided")

    # Decisions that never reach the topic: the relay finds every outbox shard held, the reservation's
    # outcome is decided (the capture scheduled, in the table only), and the orchestrator dies.
    async with db.acquire() as holder:
        await holder.execute(HOLD_RELAY, "orchestrator.outbox")
        await _open(db, unrelayed, "inventory.reserve")

        async def decided_unrelayed() -> bool:
            scheduled = await db.fetch(
                "SELECT data->>'activity' AS activity FROM orchestrator.history "
                "WHERE workflow_id = $1 AND type = 'workflow.activity_scheduled'",
                unrelayed,
            )
            return "payments.capture" in {r["activity"] for r in scheduled}

        await assert_eventually(decided_unrelayed, timeout=60, message="the capture decided, not relayed")
        await orchestrator.kill()
        await holder.execute(RELEASE_RELAY)

    # No orchestrator runs: an activity finishes, its outcome only on the runs topic.
    await _open(db, stopped_outcome, "inventory.reserve")

    async def reserved() -> bool:
        state = await db.fetchval("SELECT state FROM claimer.runs WHERE run_id = $1", f"{stopped_outcome}/2")
        return bool(state == "completed")

    await assert_eventually(reserved, timeout=60, message="the reservation completed at the claimer")

    await db.execute("DROP SCHEMA orchestrator CASCADE")
    settings = orchestrator_settings(kafka, pg_dsn)
    report = await rebuild(settings, workflow_code=workflow_code)
    assert report.problems == [], report.lines()
    assert report.child_outcomes == 1, report.lines()
    assert report.inputs >= 2, report.lines()  # the signal and the compensation's outcome at least
    assert (await check(settings)).agree
    # A second rebuild would overwrite what this one restored: refused, on the command line too.
    with pytest.raises(RebuildRefused):
        await rebuild(settings, workflow_code=workflow_code)
    refused = _cli("rebuild", kafka, pg_dsn)
    assert refused.returncode == 2, refused.stderr
    assert "--force" in refused.stderr

    await start_orchestrator_()
    failed = (await flows.wait(compensating, "workflow.failed", timeout=90))[-1]
    assert isinstance(failed, WorkflowFailed)
    assert failed.compensated
    assert isinstance((await flows.wait(approval, "workflow.completed", timeout=90))[-1], WorkflowCompleted)
    parent_events = await flows.wait(parent, "workflow.completed", timeout=90)
    assert len([e for e in parent_events if isinstance(e, ChildWorkflowCompleted)]) == 1
    await flows.wait(stopped_outcome, "workflow.completed", timeout=90)
    await flows.wait(unrelayed, "workflow.completed", timeout=90)
    napped = await flows.wait(sleeper, "workflow.completed", timeout=90)
    assert len([e for e in napped if isinstance(e, WorkflowTimerFired)]) == 1
    sleeping_parent = await flows.wait(sleeping_child_parent, "workflow.completed", timeout=90)
    assert len([e for e in sleeping_parent if isinstance(e, ChildWorkflowCompleted)]) == 1

    assert await flows.effects(f"{compensating}/") == COMPENSATED
    assert await flows.effects(f"{approval}/") == ["payments.authorize"]
    assert await flows.effects(f"{parent}-child/") == SAGA
    assert await flows.effects(f"{sleeping_child_parent}-child/") == SAGA
    assert await flows.effects(f"{stopped_outcome}/") == SAGA
    assert await flows.effects(f"{unrelayed}/") == SAGA
    assert await flows.effects(f"{sleeper}/") == ["payments.authorize"]
    twice = await db.fetch("SELECT run_id, count(*) FROM order_effects GROUP BY run_id HAVING count(*) > 1")
    assert twice == []

    async def relayed() -> bool:
        report = await check(settings)
        assert report.agree, report.lines()
        return report.in_flight == 0

    await assert_eventually(relayed, timeout=30, message="every history event relayed")
    assert (await check(settings)).topic_workflows == 9  # seven workflows and two children

    # A history row the topic holds and the table lost is a difference, and `check` exits 1.
    await db.execute("DELETE FROM orchestrator.history WHERE workflow_id = $1 AND sequence = 2", approval)
    differs = await check(settings)
    assert [d for d in differs.differences if d.startswith(f"{approval} #2 ")], differs.lines()
    checked = _cli("check", kafka, pg_dsn)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert f"{approval} #2 " in checked.stdout
