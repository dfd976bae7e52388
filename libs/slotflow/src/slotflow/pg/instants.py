"""Instants passed to PostgreSQL as int8 microseconds since the Unix epoch, for hot statements.

asyncpg encodes a timestamptz through four Python-level datetime operations (two comparisons with
infinity, a time-zone conversion, a subtraction), several times what computing the microseconds
and encoding an int8 costs (figures: docs/benchmarks/ticker.md). A statement that
advances thousands of rows a second with three instants each pays that on every row, so it passes
microseconds and converts them in SQL with `FROM_MICROS`.

The conversion is exact: an int8 of microseconds times `interval '1 microsecond'` is computed in
double precision, which holds every microsecond count below 2**53 (until the year 2255) exactly.
"""

from datetime import UTC, datetime, timedelta

UNIX_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)

#: SQL for the instant of an int8 of microseconds since the Unix epoch; format it with the operand.
FROM_MICROS = "(timestamptz 'epoch' + ({}) * interval '1 microsecond')"


def to_micros(at: datetime | None) -> int | None:
    """``at`` (aware) as whole microseconds since the Unix epoch; None stays None (SQL NULL)."""
    if at is None:
        return None
    return (at - UNIX_EPOCH) // _MICROSECOND
