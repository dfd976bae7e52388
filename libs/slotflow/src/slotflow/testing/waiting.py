"""Polling assertions: wait for a condition instead of sleeping a fixed time."""

import asyncio
import inspect
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

T = TypeVar("T")


# Two signatures, so a coroutine probe's result type is what it awaits to (not the coroutine) and
# a plain function's is its return type; None is dropped (a falsy result means "not yet"), so
# `found = await assert_eventually(probe)` is typed as what the probe finds.
@overload
async def assert_eventually(
    probe: Callable[[], Awaitable[T | None]],
    *,
    timeout: float = ...,
    interval: float = ...,
    message: str = ...,
) -> T: ...


@overload
async def assert_eventually(
    probe: Callable[[], T | None],
    *,
    timeout: float = ...,
    interval: float = ...,
    message: str = ...,
) -> T: ...


async def assert_eventually(
    probe: Callable[[], Any],
    *,
    timeout: float = 20.0,
    interval: float = 0.05,
    message: str = "condition",
) -> Any:
    """Call ``probe`` until it returns a truthy value (returned) or ``timeout`` seconds pass.

    An `AssertionError` raised by the probe counts as "not yet"; the last one is re-raised at the
    deadline so the failure shows what was observed.
    """
    deadline = time.monotonic() + timeout
    last_error: AssertionError | None = None
    while True:
        try:
            result = probe()
            if inspect.isawaitable(result):
                result = await result
            if result:
                return result
            last_error = None
        except AssertionError as err:
            last_error = err
        if time.monotonic() >= deadline:
            if last_error is not None:
                raise last_error
            raise AssertionError(f"{message} not met within {timeout:.1f}s")
        await asyncio.sleep(interval)


def unique_name(prefix: str) -> str:
    """A name no other test run uses: topics, groups, databases."""
    return f"{prefix}_{uuid.uuid4().hex[:12]}"
