"""Activity heartbeats, the pure parts: the details a handler records, how often they are written,
and the error a silent attempt fails with.

A handler reports progress with `ctx.heartbeat(details)` (Temporal's `activity.heartbeat`). The
claimer writes the newest details on the run, fenced by the run's token, at most once per
`throttle_seconds`; an attempt that stays silent for its policy's `heartbeat_timeout` fails with
`HeartbeatTimeout` and is retried by that policy; the next attempt reads the last details recorded
(`ctx.heartbeat_details`, Temporal's `activity.info().heartbeat_details`). docs/claimer.md,
"Heartbeats".
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pydantic_core

from slotflow.contracts.acceptance import check_value
from slotflow.core.nul import jsonb_text
from slotflow.errors import InvalidPayload, PermanentError, TransientError

#: The largest details one heartbeat records, as JSON (non-ASCII escaped, so characters are bytes).
#: Details say where an attempt got to (an offset, a cursor, the ids done), not the data itself:
#: they are rewritten on every heartbeat and read back whole by the next attempt.
HEARTBEAT_DETAILS_MAX_BYTES = 64 * 1024
#: With a `heartbeat_timeout`, a heartbeat is written at most once per this fraction of it (as
#: Temporal's SDK does), so a write that takes a while still lands before the timeout.
THROTTLE_FRACTION = 0.8
#: Without a `heartbeat_timeout` (details only, for the next attempt): at most one write per 30 s.
DEFAULT_THROTTLE_SECONDS = 30.0
#: Never longer between writes than this, however long the timeout (Temporal's 60 s too).
MAX_THROTTLE_SECONDS = 60.0


class HeartbeatTimeout(TransientError):
    """The attempt sent no heartbeat within its heartbeat_timeout; it failed and is retried by its
    retry policy, and the next attempt reads the last details recorded."""


class HeartbeatDetailsError(PermanentError, ValueError):
    """`ctx.heartbeat` was given details that are not JSON, cannot be stored, or are too large."""


def details_json(details: Any) -> str:
    """``details`` as the JSON text recorded on the run (a pydantic model or dataclass is dumped).

    Raises:
        HeartbeatDetailsError: not JSON-able, holding what PostgreSQL cannot store (a NUL, NaN, a
            lone surrogate, nesting past the acceptance rule's depth), or past
            HEARTBEAT_DETAILS_MAX_BYTES.
    """
    try:
        jsonable = pydantic_core.to_jsonable_python(details)
    except (pydantic_core.PydanticSerializationError, ValueError) as err:
        raise HeartbeatDetailsError(
            f"heartbeat details must be JSON (a dict, list, str, number, bool, or a pydantic model or "
            f"dataclass of them), not {type(details).__name__}: {err}"
        ) from None
    try:
        check_value(jsonable, "heartbeat details")
    except InvalidPayload as err:
        raise HeartbeatDetailsError(str(err)) from None
    text = jsonb_text(jsonable)
    if len(text) > HEARTBEAT_DETAILS_MAX_BYTES:
        raise HeartbeatDetailsError(
            f"heartbeat details are {len(text)} bytes of JSON; the limit is {HEARTBEAT_DETAILS_MAX_BYTES} "
            "(HEARTBEAT_DETAILS_MAX_BYTES): record where the attempt got to (an offset, a cursor), "
            "not the data"
        )
    return text


def throttle_seconds(heartbeat_timeout: timedelta | None) -> float:
    """The shortest time between two heartbeat writes of one attempt."""
    if heartbeat_timeout is None:
        return DEFAULT_THROTTLE_SECONDS
    return min(THROTTLE_FRACTION * heartbeat_timeout.total_seconds(), MAX_THROTTLE_SECONDS)


@dataclass(slots=True)
class Throttle:
    """When the next heartbeat write may start, given when the last one started (monotonic seconds)."""

    interval: float
    last_write: float | None = None

    def wait(self, now: float) -> float:
        """Seconds until a write may start: 0 for at once."""
        if self.last_write is None:
            return 0.0
        return max(self.last_write + self.interval - now, 0.0)

    def wrote(self, now: float) -> None:
        self.last_write = now


def silence_message(timeout: timedelta, *, owner: str | None = None) -> str:
    """What a heartbeat timeout says: the timeout, and which claimer went silent when known."""
    seconds = f"{timeout.total_seconds():g}"
    who = f" (claimer {owner} stopped, froze or lost the database)" if owner else ""
    return (
        f"no heartbeat within heartbeat_timeout {seconds} s{who}; the attempt failed and is retried "
        "by its retry policy"
    )
