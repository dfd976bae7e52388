"""Small builders for the api tests."""

from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any

import httpx

from slotflow.contracts import CronSpec, Envelope, IntervalSpec, ScheduleDefinition
from slotflow.contracts.codec import decode
from slotflow.contracts.topics import TopicSpec
from slotflow.kafka.consumer import Consumer
from slotflow.pg.pool import Pool
from slotflow.pg.statements import quote_ident, sql_with
from slotflow.settings import KafkaSettings
from slotflow.testing import assert_eventually, unique_name
from slotflow.testing.topics import first_reads


def cron(
    expression: str = "0 2 * * *", *, handler: str = "payouts.pay", tags: tuple[str, ...] = ()
) -> ScheduleDefinition:
    return ScheduleDefinition(spec=CronSpec(expression=expression), handler=handler, tags=tags)


def interval(every_seconds: int, anchor: datetime, *, handler: str = "reports.build") -> ScheduleDefinition:
    return ScheduleDefinition(
        spec=IntervalSpec(every=timedelta(seconds=every_seconds), anchor=anchor), handler=handler
    )


async def eventually_json(
    client: httpx.AsyncClient, url: str, check: Callable[[dict[str, Any]], bool], *, status: int = 200
) -> dict[str, Any]:
    """GET ``url`` until it answers ``status`` with a body ``check`` accepts; return that body."""
    seen: list[Any] = []

    async def probe() -> dict[str, Any] | None:
        response = await client.get(url)
        body = response.json()
        seen[:] = [response.status_code, body]
        if response.status_code == status and check(body):
            return dict(body)
        return None

    try:
        result: dict[str, Any] = await assert_eventually(probe, timeout=30)
    except AssertionError as err:
        raise AssertionError(f"{url}: last answer {seen}") from err
    return result


Probe = Callable[[], Awaitable[object]]


async def read_topic(
    kafka: KafkaSettings, spec: TopicSpec, *, want: int, timeout: float = 20.0
) -> list[Envelope]:
    """Every envelope on ``spec`` from the start, once at least ``want`` have arrived."""
    found: list[Envelope] = []
    positions: set[str] = set()
    async with Consumer(
        kafka, kafka.topic(spec), group_id=unique_name("reader"), client_id="reader"
    ) as consumer:

        async def enough() -> bool:
            for record in first_reads(await consumer.poll(timeout_ms=200), positions):
                found.append(decode(record.value))
            return len(found) >= want

        await assert_eventually(enough, timeout=timeout, message=f"{want} records on {spec.name}")
    return found


async def read_model_snapshot(pool: Pool, schema: str) -> dict[str, list[tuple[str, ...]]]:
    """Every read-model table's rows as sorted text tuples (bookkeeping tables left out), to compare
    the read model before and after a rebuild."""
    # One repeatable-read transaction: every table as of the same instant. Read one by one, a table
    # read early could miss an event the projector applied before a later table was read.
    async with pool.acquire() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
        tables = await conn.fetch(
            "SELECT tablename FROM pg_tables WHERE schemaname = $1 AND tablename NOT IN "
            "('schema_migrations', 'projector_state') ORDER BY tablename",
            schema,
        )
        out = {}
        for row in tables:
            every_row = sql_with(
                "SELECT * FROM {schema}.{table}", schema, table=quote_ident(row["tablename"])
            )
            records = await conn.fetch(every_row)
            out[row["tablename"]] = sorted(tuple(str(v) for v in r.values()) for r in records)
    return out
