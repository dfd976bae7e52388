"""slotflow.pg.statements: statements rendered per schema with the schema quoted."""

import pytest

from slotflow.errors import ConfigurationError
from slotflow.pg.statements import InvalidIdentifier, compose, quote_ident, sql, sql_with

STATEMENT = "SELECT count(*) FROM {schema}.runs WHERE state = $1 AND {schema}.runs.x = '{}'"


def test_the_schema_is_quoted_everywhere_and_the_rendering_is_reused() -> None:
    rendered = sql(STATEMENT, "claimer")
    assert rendered == 'SELECT count(*) FROM "claimer".runs WHERE state = $1 AND "claimer".runs.x = \'{}\''
    assert sql(STATEMENT, "claimer") is rendered
    assert sql_with("SELECT 1 FROM {schema}.t WHERE {where}", "dlq", where="id = $2") == (
        'SELECT 1 FROM "dlq".t WHERE id = $2'
    )


@pytest.mark.parametrize("name", ["Claimer", "a-b", "x; DROP TABLE runs", "", "a" * 64, '"q"'])
def test_anything_but_a_plain_lower_case_name_is_refused(name: str) -> None:
    with pytest.raises(InvalidIdentifier):
        quote_ident(name)
    with pytest.raises(ConfigurationError):
        sql(STATEMENT, name)


def test_compose_fills_fragments_and_leaves_the_schema_for_later() -> None:
    statement = compose("SELECT {columns} FROM {schema}.runs", columns="run_id, state")
    assert statement == "SELECT run_id, state FROM {schema}.runs"
    assert sql(statement, "claimer") == 'SELECT run_id, state FROM "claimer".runs'
