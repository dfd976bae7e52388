"""`python -m slotflow_stats` (console script `slotflow-stats`), run from the stats environment.

slotflow-stats worker    the faust worker: consume the event topics, keep the windowed tables,
                         copy them to PostgreSQL (schema SLOTFLOW_STATS_DB_SCHEMA, default stats)

Logs go through `slotflow_base.logs` like every service's: text or JSON lines (SLOTFLOW_LOG_*),
every secret masked, faust's and mode's lines included.
"""

import argparse
import asyncio
import logging
import sys

from slotflow_base.logs import configure_logging
from slotflow_stats.config import Settings
from slotflow_stats.errors import StatsError

log = logging.getLogger("slotflow_stats")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="slotflow-stats", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", nargs="?", default="worker", choices=["worker"])
    parser.add_argument(
        "--loglevel",
        default=None,
        choices=["debug", "info", "warning", "error"],
        help="default SLOTFLOW_LOG_LEVEL",
    )
    args = parser.parse_args(argv)
    # Before the settings are read: a refused setting's traceback passes the redacting excepthook.
    configure_logging(level=args.loglevel)
    # faust is imported here, not at the top: the pure parts of this package load in the durable
    # core's environment, which has no faust (the tests and mypy read them there).
    import faust

    from slotflow_stats.app import SOURCES, Processor, ensure_changelogs, partitions_of

    settings = Settings()
    topics = [settings.kafka.topic_name(name) for names in SOURCES.values() for name in names]
    try:
        partitions = asyncio.run(partitions_of(settings.kafka, topics))
        processor = Processor(settings, partitions)
        asyncio.run(
            ensure_changelogs(
                settings.kafka,
                processor.changelogs(),
                replication=settings.stats.changelog_replication_factor,
            )
        )
    except StatsError as err:
        log.error("slotflow-stats cannot start: %s", err)
        return 1
    # faust creates only the last level of its data directory.
    settings.stats.data_dir.mkdir(parents=True, exist_ok=True)
    # asyncio.run closed its loop; faust's worker needs a current one.
    asyncio.set_event_loop(asyncio.new_event_loop())
    # override_logging=False: mode's worker would otherwise drop the handler configure_logging
    # installed (its setup clears the root logger's handlers) for one of its own, which masks
    # nothing, and send stray prints to the log through it. faust's loggers propagate to ours.
    worker = faust.Worker(
        processor.app,
        loglevel=logging.getLevelName(logging.getLogger().level),
        quiet=True,
        override_logging=False,
    )
    # faust's terminal spinner writes cursor codes to stdout even when it is no terminal, which
    # broke the JSON lines a log shipper reads.
    worker.spinner = None
    worker.execute_from_commandline()
    return 0


if __name__ == "__main__":
    sys.exit(main())
