"""The peer benchmarks' modules, imported as the harness imports them (bench/ on sys.path)."""

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[3] / "bench"


@pytest.fixture(scope="session")
def peers_modules() -> Iterator[dict[str, ModuleType]]:
    sys.path.insert(0, str(BENCH))
    try:
        yield {name: importlib.import_module(f"peers.{name}") for name in ("common", "report", "install")}
    finally:
        sys.path.remove(str(BENCH))


@pytest.fixture
def report(peers_modules: dict[str, ModuleType]) -> ModuleType:
    return peers_modules["report"]


@pytest.fixture
def common(peers_modules: dict[str, ModuleType]) -> ModuleType:
    return peers_modules["common"]


@pytest.fixture
def install(peers_modules: dict[str, ModuleType]) -> ModuleType:
    return peers_modules["install"]
