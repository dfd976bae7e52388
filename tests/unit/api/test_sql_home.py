"""Every statement the api runs lives in its `slotflow_api.sql` package (docs/development.md,
"Persistence modules"): a statement written anywhere else in the api fails here, and so does a
function or class in the package (its modules hold statements, and nothing that runs them).

A statement is a string literal (adjacent literals are one) that starts, after whitespace, with a
statement's keyword in upper case, or that names a table of the service's schema (`{schema}.`): a
fragment of a statement (a join, a column list with a subquery) belongs beside the statements too.
A condition of a `Filters` clause (`r.job_id = {}`) is neither, and stays with the function that
builds the clause, as the dlq's do.
"""

import ast
import importlib
import re
from pathlib import Path

import pytest

import slotflow_api

API = Path(slotflow_api.__file__).parent
SQL_PACKAGE = API / "sql"

# Upper case and followed by more of a statement: an HTTP method ("DELETE") or prose is not one.
_STATEMENT_START = re.compile(
    r"^\s*(SELECT|INSERT\s+INTO|UPDATE|DELETE\s+FROM|WITH|TRUNCATE|LOCK\s+TABLE|MERGE\s+INTO|VALUES)\s+\S"
)


def is_statement(text: str) -> bool:
    """Whether ``text`` is a statement or a fragment of one."""
    return _STATEMENT_START.match(text) is not None or "{schema}." in text


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the docstring nodes in ``tree`` (a module's, a class's, a function's)."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def statements_in_source(source: str) -> list[tuple[int, str]]:
    """(line, text) of each statement literal in the module ``source``, docstrings left out."""
    tree = ast.parse(source)
    docstrings = _docstrings(tree)
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
        and is_statement(node.value)
    ]


def _statements_in(path: Path) -> list[str]:
    return [
        f"{path.relative_to(API)}:{line}: {text.strip().splitlines()[0]}"
        for line, text in statements_in_source(path.read_text())
    ]


def test_no_api_module_outside_the_sql_package_holds_a_statement() -> None:
    outside = sorted(p for p in API.rglob("*.py") if SQL_PACKAGE not in p.parents)
    found = [line for path in outside for line in _statements_in(path)]
    assert found == [], "move each into slotflow_api.sql, a named constant:\n" + "\n".join(found)


#: The package's public strings that are clauses of a statement built at run time, not statements.
CLAUSES = {"slotflow_api.sql.read_model.ATTENTION", "slotflow_api.sql.stats.SUBJECT_FILTER"}


def test_the_check_recognises_every_statement_of_the_package() -> None:
    # A check that recognised none of the statements where they belong would pass on any module.
    missed: list[str] = []
    for path in sorted(SQL_PACKAGE.glob("*.py")):
        module = importlib.import_module(f"slotflow_api.sql.{path.stem}")
        for name, value in vars(module).items():
            qualified = f"{module.__name__}.{name}"
            if (
                name.isupper()
                and not name.startswith("_")
                and isinstance(value, str)
                and not is_statement(value)
                and qualified not in CLAUSES
            ):
                missed.append(qualified)
    assert missed == []


def test_the_sql_package_holds_nothing_that_runs_a_statement() -> None:
    runners = [
        f"{path.name}:{node.lineno}: {node.name}"
        for path in sorted(SQL_PACKAGE.glob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    ]
    assert runners == []


@pytest.mark.parametrize(
    "text",
    [
        "SELECT 1",
        "\nINSERT INTO {schema}.runs (run_id) VALUES ($1)",
        "UPDATE t SET a = 1",
        "  DELETE FROM {schema}.runs WHERE run_id = $1",
        "\nWITH x AS (SELECT 1) SELECT * FROM x",
        "TRUNCATE {tables}",
        "LEFT JOIN {schema}.commands c ON c.command_id = d.command_id",
    ],
)
def test_a_statement_or_a_fragment_of_one_is_recognised(text: str) -> None:
    assert is_statement(text)


@pytest.mark.parametrize(
    "text",
    [
        "DELETE",
        "GET",
        "r.job_id = {}",
        "(r.slot, r.run_id) > ({}, {})",
        "Select the runs",
        "ASC",
        "with care",
    ],
)
def test_a_method_a_condition_or_prose_is_not(text: str) -> None:
    assert not is_statement(text)


def test_adjacent_literals_are_one_statement_and_docstrings_are_left_out() -> None:
    source = (
        '"""SELECT the runs: a docstring."""\n'
        "\n"
        "QUERY = (\n"
        '    "SELECT run_id "\n'
        '    "FROM {schema}.runs"\n'
        ")\n"
        'METHOD = "DELETE"\n'
    )
    assert statements_in_source(source) == [(4, "SELECT run_id FROM {schema}.runs")]
