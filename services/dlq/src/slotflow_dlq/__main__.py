"""`python -m slotflow_dlq` (console script `slotflow-dlq`): run one DLQ service replica.

SIGTERM or SIGINT stops it gracefully: the batches in hand are finished and committed, then every
connection is closed. Anything staged but not yet published is published by the next start.
"""

import asyncio
import logging
import os
import signal
import sys

from slotflow_dlq.app import DlqService


async def _serve() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await DlqService().run(stop)


def main() -> int:
    logging.basicConfig(
        level=os.environ.get("SLOTFLOW_LOG_LEVEL", "INFO"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    asyncio.run(_serve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
