"""`python -m slotflow_api` (console script `slotflow-api`).

slotflow-api serve [--no-projector]   HTTP API, with the projector in the same process by default
slotflow-api project                  only the projector
slotflow-api rebuild [--idle SECONDS] empty the read model and replay every topic from the start
slotflow-api migrate                  create or update the read-model schema
"""

import argparse
import asyncio
import contextlib
import logging
import signal
import sys

import uvicorn

from slotflow.errors import SlotflowError
from slotflow.logs import configure_logging
from slotflow.pg.pool import create_pool, wait_for_pool
from slotflow.tracing import configure_tracing
from slotflow_api.app import create_app
from slotflow_api.config import Settings
from slotflow_api.projector import Projector, migrate, rebuild, run_until_idle
from slotflow_api.retention import purge_read_model

log = logging.getLogger("slotflow_api")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="slotflow-api", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command")
    serve = sub.add_parser("serve", help="serve the HTTP API (default)")
    serve.add_argument("--no-projector", action="store_true", help="do not project in this process")
    serve.add_argument("--host", help="listen address (SLOTFLOW_API_HOST)")
    serve.add_argument("--port", type=int, help="listen port (SLOTFLOW_API_PORT)")
    sub.add_parser("project", help="run only the projector")
    again = sub.add_parser("rebuild", help="empty the read model and replay every topic from the start")
    again.add_argument("--idle", type=float, default=3.0, help="stop after this many seconds without news")
    sub.add_parser("migrate", help="create or update the read-model schema")
    return parser


async def _project(settings: Settings) -> None:
    pool = await wait_for_pool(settings.postgres)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        async with asyncio.TaskGroup() as both:
            both.create_task(Projector(pool, settings).run(stop))
            both.create_task(purge_read_model(stop, pool, settings))
    finally:
        await pool.close()


async def _rebuild(settings: Settings, idle: float) -> None:
    pool = await create_pool(settings.postgres)
    try:
        group = await rebuild(pool, settings)
        print(f"read model emptied; replaying every topic with group {group}", file=sys.stderr)  # noqa: T201
        count = await run_until_idle(pool, settings, idle_seconds=idle)
        print(f"replayed {count} events", file=sys.stderr)  # noqa: T201
    finally:
        await pool.close()


async def _migrate(settings: Settings) -> None:
    pool = await create_pool(settings.postgres)
    try:
        applied = await migrate(pool, settings.api.db_schema)
        print("\n".join(applied) or "up to date", file=sys.stderr)  # noqa: T201
    finally:
        await pool.close()


def _serve(settings: Settings) -> int:
    """Serve HTTP until SIGTERM/SIGINT (exit 0) or until a loop of the process crashes (exit 1,
    unless SLOTFLOW_API_KEEP_SERVING_AFTER_CRASH keeps it serving stale reads)."""
    crashes: list[str] = []
    server: uvicorn.Server | None = None

    def stop_serving(reason: str) -> None:
        crashes.append(reason)
        if server is not None:
            server.should_exit = True

    api = settings.api
    # log_config=None: uvicorn's loggers propagate to the root handler configure_logging set up
    # (one format, and the secret mask), instead of handlers of uvicorn's own.
    config = uvicorn.Config(
        create_app(settings, on_crash=stop_serving),
        host=api.host,
        port=api.port,
        log_level="info",
        log_config=None,
    )
    server = uvicorn.Server(config)
    server.run()
    if crashes:
        print(f"slotflow-api: {crashes[0]}", file=sys.stderr)  # noqa: T201
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    configure_logging()
    configure_tracing("slotflow-api")
    settings = Settings()
    command = args.command or "serve"
    try:
        if command == "project":
            with contextlib.suppress(KeyboardInterrupt):
                asyncio.run(_project(settings))
        elif command == "rebuild":
            asyncio.run(_rebuild(settings, args.idle))
        elif command == "migrate":
            asyncio.run(_migrate(settings))
        else:
            api = settings.api.model_copy(
                update={
                    "embedded_projector": settings.api.embedded_projector
                    and not getattr(args, "no_projector", False),
                    "host": getattr(args, "host", None) or settings.api.host,
                    "port": getattr(args, "port", None) or settings.api.port,
                }
            )
            chosen = settings.model_copy(update={"api": api})
            return _serve(chosen)
    except SlotflowError as err:
        print(f"slotflow-api: {err}", file=sys.stderr)  # noqa: T201
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
