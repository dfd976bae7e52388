"""`python -m slotflow_ticker` / `slotflow-ticker`: run a replica, migrate, or preview a schedule.

slotflow-ticker [run]                 run one replica until SIGTERM or SIGINT
slotflow-ticker migrate               create or upgrade the ticker schema, then exit
slotflow-ticker preview --cron "30 2 * * *" --timezone Europe/Berlin --count 10
slotflow-ticker preview --schedule-id payouts.nightly --count 5   (reads the stored definition)
slotflow-ticker preview --cron "H 2 * * *" --as-schedule payouts.nightly   (H drawn from that id)
"""

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from pydantic import ValidationError

from slotflow.contracts import DstPolicy, ScheduleSpec
from slotflow.contracts.schedules import CronSpec, IntervalSpec, OnceSpec
from slotflow.errors import CronNeedsScheduleId
from slotflow.logs import configure_logging
from slotflow.pg.pool import create_pool
from slotflow.pg.statements import sql
from slotflow.service import serve
from slotflow.settings import PostgresSettings
from slotflow.tracing import configure_tracing
from slotflow_ticker.app import TickerService, migrate
from slotflow_ticker.config import Settings, TickerSettings
from slotflow_ticker.preview import preview_lines
from slotflow_ticker.rows import parse_definition
from slotflow_ticker.sql import STORED_DEFINITION


def main(argv: Sequence[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    configure_logging(level=args.log_level)
    configure_tracing("slotflow-ticker")
    command = args.command or "run"
    if command == "run":
        settings = Settings()
        sys.exit(
            serve("slotflow-ticker", lambda: TickerService(settings), event_loop=settings.ticker.event_loop)
        )
    elif command == "migrate":
        asyncio.run(_migrate())
    else:
        sys.exit(asyncio.run(_preview(args)))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="slotflow-ticker", description="slotflow ticker: owns time")
    parser.add_argument(
        "--log-level",
        default=None,
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="default SLOTFLOW_LOG_LEVEL",
    )
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("run", help="run one ticker replica (the default)")
    sub.add_parser("migrate", help="create or upgrade the ticker schema and exit")
    show = sub.add_parser("preview", help="list a schedule's next firings with DST days marked")
    what = show.add_mutually_exclusive_group(required=True)
    what.add_argument("--cron", help='5 fields (minute first) or 6 (seconds first), e.g. "30 2 * * *"')
    what.add_argument("--every", type=float, help="a fixed interval, in seconds")
    what.add_argument("--once", help="a one-shot instant, ISO-8601 with offset")
    what.add_argument("--schedule-id", help="a stored schedule (reads the ticker schema)")
    show.add_argument(
        "--as-schedule",
        metavar="ID",
        help="the schedule id an H in --cron draws its values from (a stored schedule uses its own)",
    )
    show.add_argument("--timezone", default="UTC", help="IANA zone for --cron")
    show.add_argument("--anchor", help="grid anchor for --every, ISO-8601 with offset")
    show.add_argument("--repeated", choices=["first", "last", "both"], default="first")
    show.add_argument("--nonexistent", choices=["shift", "skip"], default="shift")
    show.add_argument("--after", help="list firings after this instant (default: now)")
    show.add_argument("--count", type=int, default=10)
    return parser


async def _migrate() -> None:
    settings = TickerSettings()
    pool = await create_pool(PostgresSettings(), min_size=1, max_size=2)
    try:
        for name in await migrate(pool, settings):
            logging.getLogger("slotflow_ticker").info("applied %s", name)
    finally:
        await pool.close()


async def _preview(args: argparse.Namespace) -> int:
    try:
        after = datetime.fromisoformat(args.after) if args.after else datetime.now(UTC)
        if after.tzinfo is None:
            raise ValueError("--after needs an offset, e.g. 2026-03-29T00:00:00+01:00")
        dst = DstPolicy(repeated=args.repeated, nonexistent=args.nonexistent)
        spec: ScheduleSpec
        schedule_id: str | None = args.as_schedule
        if args.schedule_id:
            schedule_id = args.schedule_id
            stored = await _stored(args.schedule_id)
            if stored is None:
                print(f"schedule {args.schedule_id} does not exist", file=sys.stderr)  # noqa: T201
                return 1
            spec, dst = stored
        elif args.cron:
            spec = CronSpec(expression=args.cron, timezone=args.timezone)
        elif args.every is not None:
            anchor = datetime.fromisoformat(args.anchor) if args.anchor else None
            spec = (
                IntervalSpec(every=timedelta(seconds=args.every), anchor=anchor)
                if anchor
                else IntervalSpec(every=timedelta(seconds=args.every))
            )
        else:
            spec = OnceSpec(at=datetime.fromisoformat(args.once))
        lines = preview_lines(spec, dst, after=after, count=args.count, schedule_id=schedule_id)
    except CronNeedsScheduleId:
        print("the cron uses H, which draws from a schedule id: give --as-schedule ID", file=sys.stderr)  # noqa: T201
        return 2
    except (ValidationError, ValueError) as err:
        print(f"invalid schedule: {err}", file=sys.stderr)  # noqa: T201
        return 2
    for line in lines:
        print(line.render())  # noqa: T201
    return 0


async def _stored(schedule_id: str) -> tuple[ScheduleSpec, DstPolicy] | None:
    settings = TickerSettings()
    pool = await create_pool(PostgresSettings(), min_size=1, max_size=1)
    try:
        text = await pool.fetchval(sql(STORED_DEFINITION, settings.db_schema), schedule_id)
    finally:
        await pool.close()
    if text is None:
        return None
    definition = parse_definition(text)
    return definition.spec, definition.dst


if __name__ == "__main__":
    main()
