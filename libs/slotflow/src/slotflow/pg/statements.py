"""SQL statements rendered for a schema: the one place statement text is put together from names.

A service keeps its statements as named module constants, each with the invariant it protects,
and writes `{schema}` where its schema goes. `sql(STATEMENT, schema)` renders one with the schema
quoted as an identifier, once per (statement, schema) pair: a hot statement costs a cache lookup,
and no caller formats SQL itself (ruff's S608 is on everywhere but here).
"""

import functools
import re
from typing import Any

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


class Filters:
    """A WHERE clause composed at run time from fixed conditions and numbered parameters: each
    condition is a constant with `{}` where its values go, and every value travels as a `$n`
    parameter (`args`), never in the text."""

    def __init__(self, *, first: int = 1) -> None:
        #: Placeholders start at `$first` (the statement's fixed parameters come before).
        self.first = first
        self.clauses: list[str] = []
        self.args: list[Any] = []

    def add(self, clause: str, *values: Any) -> None:
        """AND ``clause`` (its `{}` filled with one placeholder per value, in order)."""
        self.clauses.append(clause.format(*(self.param(value) for value in values)))

    def param(self, value: Any) -> str:
        """The placeholder (`$n`) of ``value``, appended to `args`."""
        self.args.append(value)
        return f"${self.first + len(self.args) - 1}"

    def where(self) -> str:
        """The conditions joined with AND (`true` when there are none)."""
        return " AND ".join(self.clauses) if self.clauses else "true"
