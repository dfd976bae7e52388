"""`python -m slotflow_stats` (console script `slotflow-stats`), run from the stats environment.

slotflow-stats worker    the faust worker: consume the event topics, keep the windowed tables,
                         copy them to PostgreSQL (schema SLOTFLOW_STATS_DB_SCHEMA, default stats)
"""

import argparse
import asyncio
import logging
import sys

from slotflow_stats.config import Settings
from slotflow_stats.errors import StatsError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="slotflow-stats", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", nargs="?", default="worker", choices=["worker"])
    parser.add_argument("--loglevel", default="info", choices=["debug", "info", "warning", "error"])
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.loglevel.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # faust is imported here, not at the top: the pure parts of this package (and the api, which
    # reads the sink) load in the durable core's environment, which has no faust.
    import faust

    from slotflow_stats.app import SOURCES, Processor, ensure_changelogs, partitions_of

    settings = Settings()
    topics = [settings.kafka.topic(name) for names in SOURCES.values() for name in names]
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
        print(f"slotflow-stats: {err}", file=sys.stderr)  # noqa: T201
        return 1
    # faust creates only the last level of its data directory.
    settings.stats.data_dir.mkdir(parents=True, exist_ok=True)
    # asyncio.run closed its loop; faust's worker needs a current one.
    asyncio.set_event_loop(asyncio.new_event_loop())
    worker = faust.Worker(processor.app, loglevel=args.loglevel, quiet=True)
    worker.execute_from_commandline()
    return 0


if __name__ == "__main__":
    sys.exit(main())
