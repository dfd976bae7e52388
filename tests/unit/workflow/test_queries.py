"""`@workflow.query`: read-only handlers answered from the replayed state, appending nothing."""

import asyncio
from datetime import timedelta
from typing import Any

import pytest
from pydantic import BaseModel

from slotflow import workflow
from slotflow.runs import RunContext
from slotflow.workflow import QueryError, UnknownQuery, WorkflowDefinitionError
from slotflow.workflow.runtime import WorkflowRuntime
from slotflow.workflow.testing import WorkflowEnvironment
from tests.unit.workflow.helpers import T0, History


class Progress(BaseModel):
    stage: str
    lines_packed: int


@workflow.defn(name="tests.packing")
class Packing:
    def __init__(self) -> None:
        self.stage = "new"
        self.packed: list[str] = []

    @workflow.run
    async def run(self, order: dict[str, Any]) -> int:
        self.stage = "packing"
        for line in order["lines"]:
            await workflow.execute_activity("warehouse.pack", {"line": line})
            self.packed.append(line)
        self.stage = "waiting for pickup"
        await workflow.wait_signal("picked_up")
        self.stage = "shipped"
        return len(self.packed)

    @workflow.query
    def progress(self) -> Progress:
        return Progress(stage=self.stage, lines_packed=len(self.packed))

    @workflow.query(name="has_line")
    def has(self, line: str) -> bool:
        return line in self.packed

    @workflow.query
    def sneaky(self, what: str) -> Any:
        if what == "activity":
            return workflow.create_task(workflow.execute_activity("warehouse.pack", {}))
        if what == "random":
            return workflow.random()
        if what == "upsert":
            workflow.upsert_memo({"x": 1})
        if what == "raise":
            raise KeyError("no such line")
        if what == "awaitable":
            return workflow.sleep(timedelta(seconds=1))
        if what == "now":
            return workflow.now().isoformat()
        return None


async def pack(ctx: RunContext) -> None:
    await asyncio.sleep(0)


async def test_a_query_answers_from_the_state_and_appends_nothing() -> None:
    async with WorkflowEnvironment([Packing], activities={"warehouse.pack": pack}) as env:
        handle = await env.start_workflow(Packing, {"lines": ["mug", "plate"]}, id="p-1")
        await env.sleep(timedelta(seconds=1))
        before = len(env.history("p-1"))
        assert await handle.query("progress") == {"stage": "waiting for pickup", "lines_packed": 2}
        assert await env.query("p-1", "has_line", "mug") is True
        assert await env.query("p-1", "has_line", "cup") is False
        assert len(env.history("p-1")) == before
        await env.signal("p-1", "picked_up")
        assert await handle.result() == 2
        # A closed workflow answers from its final state.
        assert await env.query("p-1", "progress") == {"stage": "shipped", "lines_packed": 2}


@pytest.mark.parametrize(
    ("what", "message"),
    [
        ("activity", "a query handler may only read: workflow.create_task was called in query 'sneaky'"),
        ("random", "a query handler may only read: workflow.random was called"),
        ("upsert", "a query handler may only read: workflow.upsert_memo was called"),
        ("raise", "query 'sneaky' raised KeyError"),
        ("awaitable", "query 'sneaky' returned an awaitable"),
    ],
)
async def test_a_query_that_does_more_than_read_gets_a_clear_error(what: str, message: str) -> None:
    async with WorkflowEnvironment([Packing], activities={"warehouse.pack": pack}) as env:
        await env.start_workflow(Packing, {"lines": ["mug"]}, id="p-2")
        before = list(env.history("p-2"))
        with pytest.raises(QueryError) as refused:
            await env.query("p-2", "sneaky", what)
        assert message in str(refused.value)
        assert env.history("p-2") == before
        # The workflow goes on as if nothing was asked.
        await env.signal("p-2", "picked_up")
        assert await env.handle("p-2").result() == 1


async def test_now_in_a_query_is_the_time_it_is_asked_and_records_nothing() -> None:
    async with WorkflowEnvironment([Packing], activities={"warehouse.pack": pack}) as env:
        await env.start_workflow(Packing, {"lines": []}, id="p-3")
        await env.sleep(timedelta(hours=2))
        before = len(env.history("p-3"))
        assert await env.query("p-3", "sneaky", "now") == env.now.isoformat()
        assert len(env.history("p-3")) == before


async def test_an_unknown_query_or_a_bad_argument_is_refused() -> None:
    async with WorkflowEnvironment([Packing], activities={"warehouse.pack": pack}) as env:
        await env.start_workflow(Packing, {"lines": []}, id="p-4")
        with pytest.raises(
            UnknownQuery, match=r"no query 'status' \(its queries: has_line, progress, sneaky\)"
        ):
            await env.query("p-4", "status")
        with pytest.raises(QueryError, match="the argument does not fit its handler"):
            await env.query("p-4", "has_line", {"not": "a string"})


def test_the_runtime_answers_from_an_execution_of_its_own_and_keeps_it_for_the_same_history() -> None:
    runtime = WorkflowRuntime([Packing], cache_size=8, query_cache_size=8)
    history = History(runtime, "tests.packing", {"lines": ["mug"]})
    history.replay()
    history.complete(2, None)
    history.replay()
    answered = runtime.query(history.events, "progress", now=T0)
    assert answered == {"stage": "waiting for pickup", "lines_packed": 1}
    # The decisions' cached execution is not the one that answered: a decision after the query
    # is the one the history makes.
    history.signal("picked_up")
    decision = history.replay()
    assert [e.message_type for e in decision.events] == ["workflow.completed"]
    assert runtime.query(history.events, "progress", now=T0) == {"stage": "shipped", "lines_packed": 1}


def test_an_async_query_handler_is_refused_where_it_is_defined() -> None:
    with pytest.raises(WorkflowDefinitionError, match="must be a plain def"):

        @workflow.defn(name="tests.async_query")
        class AsyncQuery:
            @workflow.run
            async def run(self) -> None: ...

            @workflow.query
            async def status(self) -> str:
                return "x"
