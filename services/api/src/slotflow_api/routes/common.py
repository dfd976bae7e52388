"""Query parameters shared by the list endpoints."""

from typing import Annotated

from fastapi import Query

Limit = Annotated[int, Query(ge=1, le=500, description="page size")]
Cursor = Annotated[
    str | None, Query(max_length=2000, description="`next_cursor` of the previous page; omit for the first")
]
#: The longest `?wait=` a request may ask for: five minutes, what an operator waits on a backfill or
#: a redrive (30 s was too short; 60 answered 422). SLOTFLOW_API_MAX_WAIT_SECONDS may lower it.
MAX_WAIT_SECONDS = 300
Wait = Annotated[
    float | None,
    Query(
        ge=0,
        le=MAX_WAIT_SECONDS,
        description=f"seconds to wait until the command is accepted or rejected, at most {MAX_WAIT_SECONDS}",
    ),
]
