"""The Temporal peer's workflows and activities, in a module of their own.

Temporal's workflow sandbox re-imports the module that defines a workflow by its name, which fails
for a script's ``__main__``; so the adapter (temporal.py) and its worker processes both import the
definitions from here. Runs only in the peers' virtualenv: temporalio is imported at module level
because the decorators need it, and the project's environment never imports this module (in its
mypy run temporalio's names are Any, hence the ``type: ignore[untyped-decorator]`` on each
decorated method).
"""

import asyncio
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.common import SearchAttributeKey

#: Retries and timeouts stay Temporal's defaults but for one bound an activity needs.
ACTIVITY_TIMEOUT = timedelta(seconds=60)
#: The workflow workload's zero-length timer. ``workflow.sleep(0)`` is a real timer in Temporal:
#: the SDK sends a StartTimer command with a zero duration and the history records TimerStarted and
#: TimerFired (checked on Server 1.29.1), so no smallest non-zero stand-in is needed.
ZERO_TIMER = timedelta(0)
#: Activities started at once while the replay workload grows its history.
REPLAY_BATCH = 50
#: Set by a recovery workflow once it waits: the adapter counts these to know every workflow has
#: been taken up by a worker (registered on the dev server by temporal.py).
WAITING = SearchAttributeKey.for_bool("BenchWaiting")


@activity.defn(name="noop")  # type: ignore[untyped-decorator]
async def noop() -> None:
    """The job and workflow step: does nothing, so the figures are the system's own cost."""


@workflow.defn(name="bench.job")
class OneActivity:
    """A job: one no-op activity, the lightest unit of work Temporal runs with a retry policy."""

    @workflow.run  # type: ignore[untyped-decorator]
    async def run(self) -> None:
        await workflow.execute_activity(noop, start_to_close_timeout=ACTIVITY_TIMEOUT)


@workflow.defn(name="bench.flow")
class TwoActivitiesAndTimer:
    """The workflow workload: two no-op activities one after the other, then a zero-length timer."""

    @workflow.run  # type: ignore[untyped-decorator]
    async def run(self) -> None:
        await workflow.execute_activity(noop, start_to_close_timeout=ACTIVITY_TIMEOUT)
        await workflow.execute_activity(noop, start_to_close_timeout=ACTIVITY_TIMEOUT)
        await workflow.sleep(ZERO_TIMER)


@workflow.defn(name="bench.long")
class LongHistory:
    """Runs no-op activities in batches until its history holds about ``target_events`` events."""

    @workflow.run  # type: ignore[untyped-decorator]
    async def run(self, target_events: int) -> int:
        steps = 0
        # Each activity adds three events (scheduled, started, completed); each batch a workflow
        # task's three more. The last batch is cut so the history ends near the target.
        while (remaining := target_events - workflow.info().get_current_history_length() - 6) >= 3:
            batch = max(1, min(REPLAY_BATCH, remaining // 3))
            await asyncio.gather(
                *(
                    workflow.execute_activity(noop, start_to_close_timeout=ACTIVITY_TIMEOUT)
                    for _ in range(batch)
                )
            )
            steps += batch
        return steps


@workflow.defn(name="bench.waiter")
class WaitsForSignal:
    """An open workflow for the recovery workload: waits on a signal, then completes."""

    def __init__(self) -> None:
        self.released = False

    @workflow.run  # type: ignore[untyped-decorator]
    async def run(self) -> None:
        workflow.upsert_search_attributes([WAITING.value_set(True)])
        await workflow.wait_condition(lambda: self.released)

    @workflow.signal(name="release")  # type: ignore[untyped-decorator]
    def release(self) -> None:
        self.released = True


@workflow.defn(name="bench.tick")
class ScheduledTick:
    """What each schedule starts: nothing to do, the start time is the measurement."""

    @workflow.run  # type: ignore[untyped-decorator]
    async def run(self) -> None:
        return None


WORKFLOWS = [OneActivity, TwoActivitiesAndTimer, LongHistory, WaitsForSignal, ScheduledTick]
ACTIVITIES = [noop]
