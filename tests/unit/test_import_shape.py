"""The import shape lint-imports cannot see: no module reads names off its own package's `__init__`.

`make lint` holds the layers (pyproject.toml, `[tool.importlinter]`; docs/development.md, "Layers").
What import-linter's graph does not show is *how* a module is reached: `from slotflow.workflow
import _loop`, written in a module of `slotflow.workflow`, is recorded as an import of
`slotflow.workflow._loop`, but it reads the name off the package while the package's `__init__`
(which imports that very module) is still running. Such a module works only as long as the
`__init__` happens to have reached the right line; a module imports what it needs by its own name.
"""

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
SOURCE_ROOTS = sorted(p for p in [*ROOT.glob("libs/*/src"), *ROOT.glob("services/*/src")] if p.is_dir())


def _module_name(path: Path, source_root: Path) -> str:
    parts = path.relative_to(source_root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_time_nodes(tree: ast.Module) -> Iterator[ast.Import | ast.ImportFrom]:
    """The imports that run when the module is imported: not those inside a function's body."""
    pending: list[ast.AST] = [tree]
    while pending:
        node = pending.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        pending.extend(ast.iter_child_nodes(node))


def _imported(node: ast.Import | ast.ImportFrom, modules: set[str]) -> set[str]:
    """The modules of ``modules`` that ``node`` imports (`from P import sub` imports P and P.sub)."""
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names} & modules
    if node.level or node.module is None:
        return set()
    return ({node.module} | {f"{node.module}.{alias.name}" for alias in node.names}) & modules


def _breaches(source_root: Path) -> list[str]:
    """Each `from P import ...` in a module of package P whose `__init__`, at import time, imports
    that module (directly or through others): the module then reads names off a package whose
    `__init__` is half done."""
    paths = {_module_name(path, source_root): path for path in sorted(source_root.rglob("*.py"))}
    trees = {module: ast.parse(path.read_text(), filename=str(path)) for module, path in paths.items()}
    modules = set(paths)
    graph = {
        module: set().union(*(_imported(node, modules) for node in _import_time_nodes(tree)))
        for module, tree in trees.items()
    }

    def reaches(start: str, goal: str) -> bool:
        seen: set[str] = set()
        pending = [start]
        while pending:
            current = pending.pop()
            if current == goal:
                return True
            if current not in seen:
                seen.add(current)
                pending.extend(graph.get(current, ()))
        return False

    found: list[str] = []
    for module, tree in trees.items():
        own_packages = {module.rsplit(".", depth)[0] for depth in range(1, module.count(".") + 1)}
        for node in _import_time_nodes(tree):
            if not isinstance(node, ast.ImportFrom) or node.level or node.module not in own_packages:
                continue
            if any(reaches(nxt, module) for nxt in graph[node.module]):
                names = ", ".join(alias.name for alias in node.names)
                where = paths[module].relative_to(source_root)
                found.append(f"{where}:{node.lineno}: from {node.module} import {names}")
    return sorted(found)


@pytest.mark.parametrize("source_root", SOURCE_ROOTS, ids=lambda root: root.parent.name)
def test_no_module_imports_through_its_own_package(source_root: Path) -> None:
    assert _breaches(source_root) == []


def test_the_check_sees_an_import_through_the_package(tmp_path: Path) -> None:
    # The shape slotflow.workflow had: the package's __init__ imports `api`, and `api` read `_loop`
    # off the package. Written the other way (the module by its own name) it passes.
    package = tmp_path / "pkg" / "flow"
    package.mkdir(parents=True)
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (package / "__init__.py").write_text("from pkg.flow.api import run\n")
    (package / "_loop.py").write_text("def current() -> None: ...\n")
    (package / "api.py").write_text("from pkg.flow import _loop\n\ndef run() -> None: ...\n")
    assert _breaches(tmp_path) == ["pkg/flow/api.py:1: from pkg.flow import _loop"]
    (package / "api.py").write_text("from pkg.flow._loop import current\n\ndef run() -> None: ...\n")
    assert _breaches(tmp_path) == []
