"""Every error a slotflow package defines derives from slotflow.errors.SlotflowError (defined in
slotflow_base.errors, so the stats worker, which cannot import the library, derives from it too).

Not errors, so not checked: control flow that must pass `except Exception` (a BaseException that
is not an Exception, such as workflow.ContinueAsNew) and a module's private signals (`_Name`),
which never leave it.
"""

import importlib
import inspect
import pkgutil

import pytest

from slotflow.errors import SlotflowError

PACKAGES = (
    "slotflow_base",
    "slotflow",
    "slotflow_ticker",
    "slotflow_claimer",
    "slotflow_dlq",
    "slotflow_api",
    "slotflow_orchestrator",
)


def _modules(package: str) -> list[str]:
    root = importlib.import_module(package)
    names = [package]
    for info in pkgutil.walk_packages(root.__path__, prefix=f"{package}."):
        if info.name.endswith("__main__"):
            continue
        names.append(info.name)
    return names


@pytest.mark.parametrize("package", PACKAGES)
def test_every_error_class_derives_from_the_library_base(package: str) -> None:
    strays = []
    for name in _modules(package):
        module = importlib.import_module(name)
        for _, value in inspect.getmembers(module, inspect.isclass):
            if value.__module__ != name or not issubclass(value, Exception):
                continue
            if value.__name__.startswith("_"):
                continue
            if not issubclass(value, SlotflowError):
                strays.append(f"{name}.{value.__qualname__}")
    assert strays == []


def test_the_stats_workers_errors_derive_from_it_too() -> None:
    # Its faust-facing modules do not import in this environment (faust lives in the stats one,
    # decision 0005); its errors module does, and every error it raises on purpose is there.
    module = importlib.import_module("slotflow_stats.errors")
    errors = [v for _, v in inspect.getmembers(module, inspect.isclass) if v.__module__ == module.__name__]
    assert errors
    assert [e.__qualname__ for e in errors if not issubclass(e, SlotflowError)] == []
