"""What handler authors import: `from slotflow.runs import handler, RunContext`."""

from slotflow.runs.context import FencedWrites, RunContext
from slotflow.runs.registry import (
    REGISTRY,
    Handler,
    HandlerFn,
    HandlerRegistry,
    UnknownHandler,
    handler,
    load_handler_modules,
)

__all__ = [
    "REGISTRY",
    "FencedWrites",
    "Handler",
    "HandlerFn",
    "HandlerRegistry",
    "RunContext",
    "UnknownHandler",
    "handler",
    "load_handler_modules",
]
