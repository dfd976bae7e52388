"""Every ticker stops, slots pass, a ticker starts again: each schedule follows its own misfire policy.

Per-second crons make the downtime cost several slots. For each schedule the slots between its
creation and the first slot its row still holds are computed with croniter; every one of them must
be either fired (JobDue) or recorded (SlotSkipped), never both, and the missed ones split exactly as
the policy says, judged at the database time of the claim that found them.
"""

from collections.abc import Sequence
from datetime import datetime, timedelta

from slotflow.contracts import CreateSchedule, CronSpec, MisfirePolicy, ScheduleDefinition
from slotflow.contracts.topics import JOBS_DUE, SCHEDULE_EVENTS
from slotflow.kafka.producer import Producer
from slotflow.pg.pool import Pool
from slotflow.settings import KafkaSettings
from slotflow_ticker.rows import parse_definition
from tests.integration.ticker.support import (
    TopicTail,
    db_now,
    drain_outbox,
    duplicates,
    expected_slots,
    send,
    tickers,
    wait_db_time,
)

GRACE = timedelta(seconds=1)
DOWNTIME = timedelta(seconds=6)
POLICIES = {
    "fire-all": MisfirePolicy(policy="fire_all", max_catch_up=3, grace=GRACE),
    "fire-once": MisfirePolicy(policy="fire_once", grace=GRACE),
    "skip": MisfirePolicy(policy="skip", grace=GRACE),
    "window": MisfirePolicy(
        policy="fire_all", max_catch_up=100, grace=GRACE, catch_up_window=timedelta(seconds=3)
    ),
}


def slots_of(tail: TopicTail, schedule_id: str) -> tuple[list[datetime], dict[datetime, str], list[datetime]]:
    """(fired slots, skipped slot → reason, database times of every record) for one schedule."""
    fired = [datetime.fromisoformat(e.data["slot"]) for e in tail.of_type("job.due") if e.key == schedule_id]
    skipped = {
        datetime.fromisoformat(e.data["slot"]): e.data["reason"]
        for e in tail.of_type("slot.skipped")
        if e.key == schedule_id
    }
    staged = [
        e.occurred_at
        for e in tail.seen_envelopes()
        if e.key == schedule_id and e.type in ("job.due", "slot.skipped")
    ]
    return fired, skipped, staged


def fired_after(tail: TopicTail, schedule_ids: Sequence[str], instant: datetime) -> bool:
    return all(
        any(e.key == s and datetime.fromisoformat(e.data["slot"]) > instant for e in tail.of_type("job.due"))
        for s in schedule_ids
    )


async def test_restart_after_downtime_honours_each_misfire_policy(
    kafka: KafkaSettings, pg_dsn: str, pg_pool: Pool
) -> None:
    async with (
        TopicTail(kafka, (JOBS_DUE, SCHEDULE_EVENTS)) as tail,
        Producer(kafka, client_id="misfire") as producer,
    ):
        async with tickers(kafka, pg_dsn):
            for schedule_id, policy in POLICIES.items():
                definition = ScheduleDefinition(
                    spec=CronSpec(expression="* * * * * *"), handler="h", misfire=policy
                )
                await send(producer, kafka, CreateSchedule(schedule_id=schedule_id, definition=definition))
            started = await db_now(pg_pool)
            await tail.wait_for(
                lambda t: fired_after(t, list(POLICIES), started + timedelta(seconds=1)), timeout=60
            )
        stopped = await db_now(pg_pool)  # no ticker runs from here on
        await wait_db_time(pg_pool, stopped + DOWNTIME)
        restarted = await db_now(pg_pool)
        async with tickers(kafka, pg_dsn):
            await tail.wait_for(
                lambda t: fired_after(t, list(POLICIES), restarted + timedelta(seconds=2)), timeout=60
            )
        await drain_outbox(pg_pool, kafka)
        rows = {
            r["schedule_id"]: r
            for r in await pg_pool.fetch(
                "SELECT schedule_id, definition::text AS d, created_at, next_slot FROM ticker.schedules"
            )
        }
        published = await pg_pool.fetchval("SELECT count(*) FROM ticker.outbox")
        await tail.wait_for(lambda t: len(t.seen) >= published, timeout=60)

    for schedule_id, policy in POLICIES.items():
        row = rows[schedule_id]
        expected = expected_slots(
            parse_definition(row["d"]), after=row["created_at"], before=row["next_slot"]
        )
        fired, skipped, staged = slots_of(tail, schedule_id)
        assert duplicates(str(s) for s in fired) == {}, schedule_id
        assert set(fired).isdisjoint(skipped), schedule_id
        assert sorted([*fired, *skipped]) == expected, f"{schedule_id}: a slot was neither fired nor recorded"

        # The claim after the restart judged the backlog at its own database time.
        claim_time = min(t for t in staged if t >= restarted)
        missed = [s for s in expected if stopped < s < claim_time - GRACE]
        assert len(missed) >= 4, f"{schedule_id}: the downtime should have cost several slots: {missed}"
        fired_missed = sorted(set(fired) & set(missed))
        if policy.policy == "skip":
            assert fired_missed == []
        elif policy.policy == "fire_once":
            assert fired_missed == [missed[-1]]
        elif schedule_id == "fire-all":
            assert fired_missed == missed[-3:]
        else:
            inside = [s for s in missed if s >= claim_time - policy.catch_up_window]
            assert fired_missed == inside
            assert {skipped[s] for s in missed if s not in inside} == {"outside_catch_up_window"}
        recorded = {skipped[s] for s in missed if s in skipped}
        if schedule_id != "window":
            assert recorded <= {"misfire"}, schedule_id
        # Slots before the stop and after the claim fired normally.
        assert all(s in fired for s in expected if s <= stopped - GRACE or s >= claim_time)
