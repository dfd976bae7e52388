"""Which waiting workflows a decider pass picks, on the real database: every held shard's oldest
ones, so a backlog on one shard cannot keep another shard's first input waiting behind it (a
survivor taking over a dead orchestrator's shards still has its own backlog to decide)."""

from slotflow.pg.pool import Pool
from tests.integration.orchestrator.conftest import StartOrchestrator

# Shards no orchestrator of the test holds (the topic has six): its decider never picks them.
BUSY, QUIET = 100, 101


async def test_a_pass_takes_every_shards_oldest_workflows_before_one_shards_backlog(
    db: Pool, start_orchestrator_: StartOrchestrator
) -> None:
    running = await start_orchestrator_()
    rows = [(f"busy-{n}", BUSY) for n in range(300)] + [("quiet-1", QUIET)]
    await db.executemany(
        "INSERT INTO orchestrator.inputs (workflow_id, shard, type, envelope) VALUES ($1, $2, 'test', '')",
        rows,
    )
    decider = running.orchestrator.decider
    assert decider is not None
    picked = await decider._pending([BUSY, QUIET], 200)
    assert ("quiet-1", QUIET) in picked
    busy = [wf for wf, shard in picked if shard == BUSY]
    # The busy shard's oldest first, in arrival order.
    assert busy == [f"busy-{n}" for n in range(len(busy))]
    assert 0 < len(picked) <= 200
