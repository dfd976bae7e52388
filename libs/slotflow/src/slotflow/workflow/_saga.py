"""Sagas: each forward step registers its undo in history; on failure or cancel the undos run in reverse.

`add_compensation` records CompensationRegistered right after the forward step's result, so the
list of what to undo is as durable as the steps themselves. `compensate()` runs the registered
undos newest first, each an activity (retried by the claimers, at least once: make it idempotent
by its run id). A crash in the middle replays: undos already done are handed back from history,
the rest run, nothing runs twice. A cancel request that arrives while compensating waits until
compensation ends, then raises at the next await.

`async with Saga() as saga:` is the form to use: it compensates on any exception that ends the
block, a cancel included, and a cancel that arrives while the block's code awaits a forward step
waits for that step's outcome, so a step whose effect happened gets its undo registered and run
(`try`/`except` around `compensate()` sees the cancel at once, and a step in flight then is never
undone).
"""

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from slotflow.contracts.policies import RetryPolicy
from slotflow.contracts.workflows import CompensationRegistered
from slotflow.workflow._api import _writable, activity_call, current, schedule
from slotflow.workflow.errors import ActivityError, WorkflowError


@dataclass(frozen=True, slots=True)
class Compensation:
    """One registered undo: `activity(payload)` compensates the step scheduled at `for_step`."""

    for_step: int
    activity: str
    payload: dict[str, Any]
    retry: RetryPolicy


class Saga:
    """Undo actions for the steps done so far.

    >>> saga = Saga()
    >>> auth = await workflow.execute_activity("payments.authorize", order)
    >>> saga.add_compensation("payments.void", auth)
    >>> try:
    ...     await workflow.execute_activity("payments.capture", auth)
    ... except ActivityError:
    ...     await saga.compensate()
    ...     raise

    Or, better, as a block that compensates on any exception (a cancel included) and re-raises,
    and lets a forward step in flight when a cancel arrives finish first, so its undo runs too:

    >>> async with Saga() as saga:
    ...     auth = await workflow.execute_activity("payments.authorize", order)
    ...     saga.add_compensation("payments.void", auth)
    ...     ...
    """

    def __init__(self) -> None:
        self._block_task: asyncio.Task[Any] | None = None
        self._pending: list[Compensation] = []
        self.failures: list[ActivityError] = []
        self.compensated = False

    @property
    def pending(self) -> tuple[Compensation, ...]:
        """Registered undos not yet run, in registration order."""
        return tuple(self._pending)

    def add_compensation(
        self, activity: str | Callable[..., Any], arg: Any = None, *, retry: RetryPolicy | None = None
    ) -> None:
        """Register ``activity(arg)`` as the undo of the activity this task completed last.

        ``activity`` is the undo's `@handler` function (``arg`` checked against its input here,
        as `workflow.execute_activity` does) or its registered name.

        Raises:
            WorkflowError: this task has not completed an activity yet.
            ActivityInputError: ``arg`` does not fit the input of the handler ``activity``.
        """
        execution = _writable("Saga.add_compensation")
        task = asyncio.current_task()
        step = execution.last_step.get(task) if task is not None else None
        if step is None:
            raise WorkflowError(
                "Saga.add_compensation registers the undo of a completed step: call it right after the "
                "`await workflow.execute_activity(...)` it undoes"
            )
        name, payload, _ = activity_call(activity, arg, "compensation")
        policy = retry or RetryPolicy()
        if execution.match(CompensationRegistered, (name, step)) is None:
            execution.record(
                CompensationRegistered, for_step=step, activity=name, payload=payload, retry=policy
            )
        self._pending.append(Compensation(step, name, payload, policy))

    async def compensate(self) -> bool:
        """Run every pending undo, newest first; True when all succeeded.

        A failing undo (out of attempts) is kept in `failures` and the rest still run.
        """
        execution = current()
        execution.shield += 1
        ok = True
        try:
            while self._pending:
                undo = self._pending.pop()
                _, future = schedule(
                    execution, undo.activity, undo.payload, undo.retry, compensates=undo.for_step
                )
                try:
                    await future
                except ActivityError as failure:
                    self.failures.append(failure)
                    ok = False
        finally:
            execution.shield -= 1
        execution.compensations_ran = True
        execution.compensations_ok = execution.compensations_ok and ok
        self.compensated = ok
        return ok

    async def __aenter__(self) -> "Saga":
        execution = current()
        task = asyncio.current_task()
        if task is not None:
            execution.saga_blocks[task] = execution.saga_blocks.get(task, 0) + 1
        self._block_task = task
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        execution = current()
        task = self._block_task
        if task is not None:
            left = execution.saga_blocks.get(task, 1) - 1
            if left > 0:
                execution.saga_blocks[task] = left
            else:
                execution.saga_blocks.pop(task, None)
        if isinstance(exc, Exception | asyncio.CancelledError):
            await self.compensate()
