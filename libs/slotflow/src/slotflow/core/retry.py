"""Full-jitter exponential back-off and failure sorting, shared by the claimer and every consumer.

Growing waits spread one job's retries; only randomness spreads *different* jobs from each other,
so ten thousand jobs that failed against one outage do not come back in lockstep.
"""

import asyncio
import math
from collections.abc import Iterable
from datetime import timedelta
from typing import Protocol

from pydantic import ValidationError

from slotflow.errors import PermanentError, PoisonMessage, SlotflowError


class RetryShape(Protocol):
    """What `next_retry_delay` reads of a retry policy (`slotflow.contracts.RetryPolicy` is one).

    A protocol rather than the contract model: core knows no message, so the contracts can build on
    it without an import cycle (docs/development.md, "Layers").
    """

    @property
    def base(self) -> timedelta: ...
    @property
    def cap(self) -> timedelta: ...
    @property
    def max_attempts(self) -> int: ...
    @property
    def backoff_coefficient(self) -> float: ...
    @property
    def non_retryable(self) -> tuple[str, ...]: ...


#: The most attempts a run can have, with or without a limit of its own: the claimer's `attempt`
#: column and every run event's `attempt` are PostgreSQL integers. A run with unlimited attempts
#: (`max_attempts` 0) is dead-lettered (`attempts_exhausted`) when it gets here instead of
#: overflowing the counter: about 68 years of retries a second apart.
ATTEMPT_CEILING = 2**31 - 1
_MICROSECOND = timedelta(microseconds=1)


def backoff_ceiling(*, attempt: int, base: timedelta, cap: timedelta, coefficient: float = 2.0) -> timedelta:
    """`min(cap, base * coefficient**attempt)`: the upper bound of the wait after ``attempt`` failures.

    ``coefficient`` 1 keeps it at ``base``; it never exceeds ``cap`` however large ``attempt`` is.
    """
    if attempt < 0:
        raise ValueError("attempt cannot be negative")
    if coefficient < 1.0 or math.isnan(coefficient):
        raise ValueError("coefficient must be at least 1")
    if coefficient == 2.0:
        # Integer doubling in microseconds keeps the delays of every policy written before the
        # coefficient exact, and compares before building a timedelta: `base * 2**attempt` past
        # 999,999,999 days is an OverflowError (an hour's base does that from the 38th attempt).
        if attempt >= 62:
            return cap
        grown = (base // _MICROSECOND) << attempt
        return cap if grown >= cap // _MICROSECOND else timedelta(microseconds=grown)
    # Compare in logarithms, so a large attempt never builds an overflowing float or timedelta.
    if base >= cap or attempt * math.log(coefficient) >= math.log(cap / base):
        return cap
    return min(cap, base * coefficient**attempt)


def full_jitter_delay(
    *, attempt: int, base: timedelta, cap: timedelta, draw: float, coefficient: float = 2.0
) -> timedelta:
    """`random(0, min(cap, base * coefficient**attempt))` with the random ``draw`` in [0, 1) given
    by the caller.

    Taking the draw as a parameter keeps this pure, so property tests can pin it.
    """
    if not 0.0 <= draw < 1.0:
        raise ValueError("draw must be in [0, 1)")
    return backoff_ceiling(attempt=attempt, base=base, cap=cap, coefficient=coefficient) * draw


#: Exceptions that say "try again": the world was briefly unavailable, not wrong.
TRANSIENT_TYPES: tuple[type[BaseException], ...] = (TimeoutError, ConnectionError, OSError)

#: SQLSTATE classes that are about the values, not the moment: the same statement with the same
#: data fails the same way every time. 22 is "data exception" (a NUL in text or jsonb, a number out
#: of range, an invalid date), 54 "program limit exceeded" (an index row or a jsonb value too big).
PERMANENT_SQLSTATE_CLASSES = frozenset({"22", "54"})


def is_data_error(error: BaseException) -> bool:
    """A database error caused by the data itself (see `PERMANENT_SQLSTATE_CLASSES`).

    Read from the error's `sqlstate` (asyncpg's PostgresError carries it), so no driver import.
    """
    sqlstate = getattr(error, "sqlstate", None)
    return isinstance(sqlstate, str) and sqlstate[:2] in PERMANENT_SQLSTATE_CLASSES


def _qualified(error_type: type[BaseException]) -> Iterable[str]:
    for klass in error_type.__mro__:
        yield klass.__name__
        yield f"{klass.__module__}.{klass.__qualname__}"


def is_retryable(error: BaseException, *, non_retryable: Iterable[str] = ()) -> bool:
    """Sort a failure: True for transient, False for permanent.

    Permanent: `PermanentError`, poison input, pydantic validation errors, database errors about
    the data (`is_data_error`: a NUL PostgreSQL cannot store, a value out of range), a recursion
    limit hit decoding or encoding nesting too deep, and any type named in ``non_retryable``
    (class name or dotted path, subclasses included). Transient: `TransientError`
    and anything `retryable`, timeouts and connection errors. Anything else is transient: an
    unknown failure deserves another try before a human is paged.
    """
    names = set(non_retryable)
    if names and names.intersection(_qualified(type(error))):
        return False
    if isinstance(error, PermanentError | PoisonMessage | ValidationError | ValueError | TypeError):
        return False
    if isinstance(error, RecursionError) or is_data_error(error):
        return False
    if isinstance(error, SlotflowError):
        return error.retryable or isinstance(error, TRANSIENT_TYPES)
    return True


def next_retry_delay(
    policy: RetryShape, *, attempt: int, error: BaseException, draw: float
) -> timedelta | None:
    """The wait before attempt ``attempt + 1`` (1-based), or None when the run should be dead-lettered.

    The first retry waits up to `base`, the second up to `coefficient * base`, and so on up to
    `cap`. ``max_attempts`` 0 sets no limit of the policy's own (`ATTEMPT_CEILING` still holds).
    """
    limit = policy.max_attempts if policy.max_attempts > 0 else ATTEMPT_CEILING
    if attempt >= min(limit, ATTEMPT_CEILING) or not is_retryable(error, non_retryable=policy.non_retryable):
        return None
    return full_jitter_delay(
        attempt=attempt - 1,
        base=policy.base,
        cap=policy.cap,
        draw=draw,
        coefficient=policy.backoff_coefficient,
    )


async def sleep_backoff(attempt: int, *, base: float = 0.1, cap: float = 10.0, draw: float) -> None:
    """Wait a full-jitter back-off in seconds (infrastructure retries inside a service)."""
    delay = full_jitter_delay(
        attempt=attempt, base=timedelta(seconds=base), cap=timedelta(seconds=cap), draw=draw
    )
    await asyncio.sleep(delay.total_seconds())
