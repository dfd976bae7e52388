"""Handlers by name, and the modules a claimer imports to register them."""

import pytest

from slotflow.errors import ConfigurationError
from slotflow.pg.fencing import InvalidIdentifier, fences_ddl, quote_identifier, quote_table
from slotflow.runs import HandlerRegistry, RunContext, UnknownHandler, handler, load_handler_modules


async def pay(ctx: RunContext) -> None:
    return None


def test_the_decorator_registers_under_the_name() -> None:
    registry = HandlerRegistry()
    decorated = handler("payouts.pay_merchants", registry=registry)(pay)
    assert decorated is pay
    assert registry.get("payouts.pay_merchants") is pay
    assert "payouts.pay_merchants" in registry


def test_a_name_taken_by_another_function_is_refused() -> None:
    registry = HandlerRegistry()
    registry.register("a", pay)
    registry.register("a", pay)  # the same function again is harmless (a module imported twice)

    async def other(ctx: RunContext) -> None:
        return None

    with pytest.raises(ConfigurationError):
        registry.register("a", other)


def test_names_must_be_identifiers() -> None:
    with pytest.raises(ConfigurationError):
        HandlerRegistry().register("no spaces allowed", pay)


def test_an_unknown_name_is_a_permanent_failure() -> None:
    with pytest.raises(UnknownHandler) as raised:
        HandlerRegistry().get("missing")
    assert raised.value.retryable is False
    assert UnknownHandler.reason == "unknown_handler"


def test_loading_a_missing_module_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError):
        load_handler_modules(["slotflow_nonexistent_module_xyz"])
    assert load_handler_modules([" ", ""]) == []


@pytest.mark.parametrize("name", ["payouts", "_p1", "A_b"])
def test_plain_identifiers_are_quoted(name: str) -> None:
    assert quote_identifier(name) == f'"{name}"'


@pytest.mark.parametrize("name", ["", "1x", 'x"; DROP TABLE t; --', "a b", "a-b", "x" * 64])
def test_anything_else_is_refused(name: str) -> None:
    with pytest.raises(InvalidIdentifier):
        quote_identifier(name)


def test_tables_may_be_schema_qualified_once() -> None:
    assert quote_table("app.payouts") == '"app"."payouts"'
    with pytest.raises(InvalidIdentifier):
        quote_table("a.b.c")
    assert '"app"."fences"' in fences_ddl("app.fences")


def test_where_a_handler_runs_follows_its_kind() -> None:
    registry = HandlerRegistry()

    def blocking(ctx: RunContext) -> None:
        return None

    registry.register("async.one", pay)
    registry.register("sync.one", blocking)
    registry.register("cpu.one", blocking, runs_in="process")
    assert registry.resolve("async.one").runs_in == "loop"
    assert registry.resolve("sync.one").runs_in == "thread"
    assert registry.resolve("cpu.one").runs_in == "process"
    with pytest.raises(ConfigurationError, match="block the loop"):
        registry.register("sync.two", blocking, runs_in="loop")
    with pytest.raises(ConfigurationError, match="is async"):
        registry.register("async.two", pay, runs_in="process")


def test_async_callables_and_partials_run_on_the_loop() -> None:
    import functools

    class Gate:
        async def __call__(self, ctx: RunContext) -> None:
            return None

    registry = HandlerRegistry()
    registry.register("gate", Gate())
    registry.register("partial", functools.partial(pay))
    assert registry.resolve("gate").runs_in == "loop"
    assert registry.resolve("partial").runs_in == "loop"
