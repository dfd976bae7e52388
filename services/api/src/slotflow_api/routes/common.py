"""Query parameters shared by the list endpoints."""

from typing import Annotated

from fastapi import Query

Limit = Annotated[int, Query(ge=1, le=500, description="page size")]
Cursor = Annotated[
    str | None, Query(max_length=2000, description="`next_cursor` of the previous page; omit for the first")
]
Wait = Annotated[
    float | None,
    Query(ge=0, le=30, description="seconds to wait until the command is accepted or rejected"),
]
