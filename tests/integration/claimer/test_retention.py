"""Retention: the claimer purges ended runs older than SLOTFLOW_CLAIMER_RUN_RETENTION_DAYS and
keeps everything else, dead-lettered runs included (issue 23)."""

from slotflow.errors import PermanentError
from slotflow.kafka.producer import Producer
from slotflow.pg.pool import Pool
from slotflow.runs import HandlerRegistry, RunContext
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually
from tests.integration.claimer.conftest import StartClaimer
from tests.integration.claimer.support import job_due, publish, wait_state


async def kept(db: Pool) -> set[str]:
    return {r["run_id"] for r in await db.fetch("SELECT run_id FROM claimer.runs")}


async def age(db: Pool, run_id: str, days: float) -> None:
    """Stand in for the passing of time: the run last changed ``days`` ago."""
    await db.execute(
        "UPDATE claimer.runs SET updated_at = now() - make_interval(days => $2) WHERE run_id = $1",
        run_id,
        days,
    )


async def test_purge_keeps_exactly_what_the_retention_says(
    kafka: KafkaSettings, producer: Producer, db: Pool, registry: HandlerRegistry, start_claimer: StartClaimer
) -> None:
    async def ok(ctx: RunContext) -> dict[str, str]:
        return {"ran": ctx.run_id}

    async def boom(ctx: RunContext) -> None:
        raise PermanentError("declined")

    registry.register("test.ok", ok)
    registry.register("test.boom", boom)
    await start_claimer(run_retention_days=30, purge_interval_seconds=0.2, purge_batch_size=2)
    jobs = [job_due(f"keep-{n}", handler="test.ok") for n in range(5)]
    failing = job_due("keep-dead", handler="test.boom")
    await publish(producer, kafka, [*jobs, failing])
    for job in jobs:
        await wait_state(db, job.run_id, "completed")
    await wait_state(db, failing.run_id, "dead_lettered")

    old = [jobs[0].run_id, jobs[1].run_id, jobs[2].run_id]
    for run_id in old:
        await age(db, run_id, 31)
    await age(db, jobs[3].run_id, 29)
    await age(db, failing.run_id, 400)  # dead-lettered: a redrive continues it, so it stays

    async def purged() -> bool:
        return not set(old) & await kept(db)

    await assert_eventually(purged, timeout=30, message="the runs that ended 31 days ago purged")
    assert await kept(db) == {jobs[3].run_id, jobs[4].run_id, failing.run_id}
