"""What handler authors import: `from slotflow.runs import handler, RunContext, ...` (docs/claimer.md).

Everything a handler needs is here: the decorator, the context it receives, the connection and
pool types it writes with, and the errors that sort its failures (TransientError retries,
PermanentError dead-letters at once, FenceRejected means another claimer owns the run,
HeartbeatTimeout is an attempt that stopped heartbeating).
"""

from slotflow.errors import FenceRejected, PermanentError, TransientError
from slotflow.pg.pool import Conn, Pool
from slotflow.runs.context import FencedWrites, RunContext
from slotflow.runs.heartbeats import HEARTBEAT_DETAILS_MAX_BYTES, HeartbeatDetailsError, HeartbeatTimeout
from slotflow.runs.registry import (
    REGISTRY,
    Handler,
    HandlerFn,
    HandlerInputError,
    HandlerRegistry,
    HandlerShape,
    UnknownHandler,
    handler,
    handler_shape,
    load_handler_modules,
)

__all__ = [
    "HEARTBEAT_DETAILS_MAX_BYTES",
    "REGISTRY",
    "Conn",
    "FenceRejected",
    "FencedWrites",
    "Handler",
    "HandlerFn",
    "HandlerInputError",
    "HandlerRegistry",
    "HandlerShape",
    "HeartbeatDetailsError",
    "HeartbeatTimeout",
    "PermanentError",
    "Pool",
    "RunContext",
    "TransientError",
    "UnknownHandler",
    "handler",
    "handler_shape",
    "load_handler_modules",
]
