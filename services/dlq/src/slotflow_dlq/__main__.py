"""`python -m slotflow_dlq` (console script `slotflow-dlq`): run one DLQ service replica.

SIGTERM or SIGINT stops it gracefully: the batches in hand are finished and committed, then every
connection is closed. Anything staged but not yet published is published by the next start.
"""

import asyncio
import signal
import sys

from slotflow.logs import configure_logging
from slotflow.tracing import configure_tracing
from slotflow_dlq.app import DlqService


async def _serve() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await DlqService().run(stop)


def main() -> int:
    configure_logging()
    configure_tracing("slotflow-dlq")
    asyncio.run(_serve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
