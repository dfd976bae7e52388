"""SQL statements rendered for a schema: the one place statement text is put together from names.

A service keeps its statements as named module constants, each with the invariant it protects,
and writes `{schema}` where its schema goes. `sql(STATEMENT, schema)` renders one with the schema
quoted as an identifier, once per (statement, schema) pair: a hot statement costs a cache lookup,
and no caller formats SQL itself (ruff's S608 is on everywhere but here).
"""

import functools
import re

from slotflow.errors import ConfigurationError

_IDENTIFIER = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


class InvalidIdentifier(ConfigurationError):
    """A schema or table name must be lower-case letters, digits and underscores (at most 63)."""


def quote_ident(name: str) -> str:
    """``name`` as a quoted PostgreSQL identifier, once it is a plain lower-case name.

    Raises:
        InvalidIdentifier: anything else (nothing is escaped: such names are refused).
    """
    if _IDENTIFIER.match(name) is None:
        raise InvalidIdentifier(f"{name!r} is not a valid schema or table name")
    return f'"{name}"'


@functools.lru_cache(maxsize=4096)
def sql(statement: str, schema: str) -> str:
    """``statement`` with every `{schema}` replaced by the quoted ``schema``."""
    return statement.replace("{schema}", quote_ident(schema))


def compose(statement: str, **fragments: str) -> str:
    """``statement`` with each `{name}` replaced by ``fragments[name]`` (`{schema}` stays): for
    fixed column lists shared by statements, or clauses built from parameter placeholders (`$3`)
    and fixed column names, never from values."""
    for name, fragment in fragments.items():
        statement = statement.replace("{" + name + "}", fragment)
    return statement


def sql_with(statement: str, schema: str, **fragments: str) -> str:
    """`sql`, then `compose`: a statement with a clause composed at run time."""
    return compose(sql(statement, schema), **fragments)
