"""Instants passed as int8 microseconds come back from PostgreSQL as exactly the same timestamptz."""

from datetime import UTC, datetime, timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slotflow.pg.instants import FROM_MICROS, to_micros
from slotflow.pg.pool import Pool

ROUND_TRIP = f"SELECT {FROM_MICROS.format('$1::int8')} = $2::timestamptz, {FROM_MICROS.format('$1::int8')}"

# hypothesis takes naive bounds and attaches the zone itself.
INSTANTS = st.datetimes(
    min_value=datetime(1970, 1, 1),  # noqa: DTZ001
    max_value=datetime(2250, 12, 31),  # noqa: DTZ001
    timezones=st.just(UTC),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(at=INSTANTS)
async def test_every_instant_to_the_microsecond_survives_the_trip(pg_pool: Pool, at: datetime) -> None:
    row = await pg_pool.fetchrow(ROUND_TRIP, to_micros(at), at)
    assert row is not None
    same, back = row
    assert same, (at, back)
    assert back == at


async def test_the_edges_that_matter_and_null(pg_pool: Pool) -> None:
    for at in (
        datetime(1970, 1, 1, tzinfo=UTC),
        datetime(2026, 3, 29, 1, 0, 0, 999_999, tzinfo=UTC),  # a DST change in Europe
        datetime(2255, 6, 1, tzinfo=UTC) - timedelta(microseconds=1),
        datetime.now(UTC),
    ):
        row = await pg_pool.fetchrow(ROUND_TRIP, to_micros(at), at)
        assert row is not None
        same, back = row
        assert same
        assert back == at
    assert to_micros(None) is None
    assert await pg_pool.fetchval(f"SELECT {FROM_MICROS.format('$1::int8')}", None) is None
