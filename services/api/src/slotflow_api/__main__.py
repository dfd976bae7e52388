"""`python -m slotflow_api` (console script `slotflow-api`).

slotflow-api serve [--no-projector]   HTTP API, with the projector in the same process by default
slotflow-api project                  only the projector
slotflow-api rebuild [--idle SECONDS] empty the read model and replay every topic from the start
slotflow-api migrate                  create or update the read-model schema
"""

import argparse
import asyncio
import logging
import sys

from slotflow.errors import SlotflowError
from slotflow.logs import configure_logging
from slotflow.pg.pool import create_pool
from slotflow.service import serve
from slotflow.tracing import configure_tracing
from slotflow_api.app import ApiService, ProjectorService
from slotflow_api.config import Settings
from slotflow_api.projector import migrate, rebuild, run_until_idle

log = logging.getLogger("slotflow_api")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="slotflow-api", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command")
    serving = sub.add_parser("serve", help="serve the HTTP API (default)")
    serving.add_argument("--no-projector", action="store_true", help="do not project in this process")
    serving.add_argument("--host", help="listen address (SLOTFLOW_API_HOST)")
    serving.add_argument("--port", type=int, help="listen port (SLOTFLOW_API_PORT)")
    sub.add_parser("project", help="run only the projector")
    again = sub.add_parser("rebuild", help="empty the read model and replay every topic from the start")
    again.add_argument("--idle", type=float, default=3.0, help="stop after this many seconds without news")
    sub.add_parser("migrate", help="create or update the read-model schema")
    return parser


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


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    configure_logging()
    configure_tracing("slotflow-api")
    settings = Settings()
    command = args.command or "serve"
    try:
        if command == "project":
            return serve(
                "slotflow-api", lambda: ProjectorService(settings), event_loop=settings.api.event_loop
            )
        if command == "rebuild":
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
            return serve("slotflow-api", lambda: ApiService(chosen), event_loop=api.event_loop)
    except SlotflowError as err:
        print(f"slotflow-api: {err}", file=sys.stderr)  # noqa: T201
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
