"""The distributions: names nobody else holds on PyPI, one version, one licence, and each one's
dependencies on the others what it imports.

`slotflow` on PyPI is an unrelated project: a dependency on that name installed it in place of the
library, and the services then failed at their first import. The library is `slotflow-lib`
(imported as `slotflow`); `slotflow-base` holds what the library and the stats worker share.
`make check-wheels` (deploy/wheels/check_wheels.py) installs and starts each service from wheels;
this checks the metadata it is built from, on every run.
"""

import ast
import re
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).parents[3]
PROJECTS = sorted(
    p.parent for p in [*ROOT.glob("libs/*/pyproject.toml"), *ROOT.glob("services/*/pyproject.toml")]
)
#: Our distributions, by the package each one installs.
DISTRIBUTIONS = {
    "slotflow": "slotflow-lib",
    "slotflow_base": "slotflow-base",
    **{f"slotflow_{p.name}": f"slotflow-{p.name}" for p in ROOT.glob("services/*") if p.is_dir()},
}


def _project(path: Path) -> dict[str, Any]:
    with (path / "pyproject.toml").open("rb") as file:
        project: dict[str, Any] = tomllib.load(file)
    return project


def _name(requirement: str) -> str:
    found = re.match(r"[A-Za-z0-9._-]+", requirement)
    assert found, requirement
    return found.group(0).lower().replace("_", "-")


def _imported_packages(source: Path) -> set[str]:
    """The top-level packages the modules under ``source`` import."""
    names: set[str] = set()
    for module in source.rglob("*.py"):
        for node in ast.walk(ast.parse(module.read_text(), str(module))):
            if isinstance(node, ast.Import):
                names |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module.split(".")[0])
    return names


def test_every_package_is_found() -> None:
    assert [p.relative_to(ROOT).as_posix() for p in PROJECTS] == [
        "libs/slotflow",
        "libs/slotflow-base",
        "services/api",
        "services/claimer",
        "services/dlq",
        "services/orchestrator",
        "services/stats",
        "services/ticker",
    ]


@pytest.mark.parametrize("path", PROJECTS, ids=lambda p: p.name)
def test_names_version_and_licence(path: Path) -> None:
    project = _project(path)
    meta = project["project"]
    (package,) = [p.name for p in (path / "src").iterdir() if (p / "__init__.py").exists()]
    assert meta["name"] == DISTRIBUTIONS[package]
    # One version for every distribution: the repository's VERSION file, through a link (setuptools
    # reads no file outside the project).
    assert "version" not in meta
    assert meta["dynamic"] == ["version"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"file": "VERSION"}
    assert (path / "VERSION").is_symlink()
    assert (path / "VERSION").resolve() == ROOT / "VERSION"
    assert meta["license"] == "Apache-2.0"
    assert meta["license-files"] == ["LICENSE"]
    assert (path / "LICENSE").resolve() == ROOT / "LICENSE"


def test_the_version_and_the_licence() -> None:
    assert re.fullmatch(r"\d+\.\d+\.\d+", (ROOT / "VERSION").read_text().strip())
    assert "Apache License" in (ROOT / "LICENSE").read_text()
    assert "Version 2.0, January 2004" in (ROOT / "LICENSE").read_text()


def test_the_image_the_manifests_run_is_this_version() -> None:
    kustomization = yaml.safe_load((ROOT / "deploy/kubernetes/kustomization.yaml").read_text())
    assert [image["newTag"] for image in kustomization["images"]] == [(ROOT / "VERSION").read_text().strip()]


@pytest.mark.parametrize("path", PROJECTS, ids=lambda p: p.name)
def test_each_depends_on_exactly_the_slotflow_packages_it_imports(path: Path) -> None:
    requires = {_name(r) for r in _project(path)["project"]["dependencies"]}
    # Never the bare name: on PyPI it is someone else's project.
    assert "slotflow" not in requires
    (package,) = [p for p in (path / "src").iterdir() if (p / "__init__.py").exists()]
    imported = {DISTRIBUTIONS[name] for name in _imported_packages(package) if name in DISTRIBUTIONS}
    ours = set(DISTRIBUTIONS.values())
    assert requires & ours == imported - {DISTRIBUTIONS[package.name]}


def test_the_api_no_longer_needs_the_stats_worker() -> None:
    # It reads the worker's histograms, counters and schema from slotflow-base; slotflow-stats
    # (faust) installs only in the worker's own environment.
    assert "slotflow-stats" not in {
        _name(r) for r in _project(ROOT / "services/api")["project"]["dependencies"]
    }
    assert "slotflow_stats" not in _imported_packages(ROOT / "services/api/src")


def test_the_base_needs_nothing_the_stats_environment_lacks() -> None:
    # slotflow-base installs beside faust (croniter<6): pydantic, pydantic-settings and aiokafka only.
    requires = {_name(r) for r in _project(ROOT / "libs/slotflow-base")["project"]["dependencies"]}
    assert requires == {"pydantic", "pydantic-settings", "aiokafka"}
    pins = {
        _name(line)
        for line in (ROOT / "services/stats/requirements.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert requires <= pins
    assert _imported_packages(ROOT / "libs/slotflow-base/src") <= {
        "slotflow_base",
        "pydantic",
        "pydantic_settings",
        "aiokafka",
        *sys.stdlib_module_names,
    }
