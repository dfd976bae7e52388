"""`python -m slotflow_claimer` (console script `slotflow-claimer`): run one claimer until SIGTERM."""

import asyncio
import logging
import signal
import sys

from slotflow.logs import configure_logging
from slotflow.tracing import configure_tracing
from slotflow_claimer.app import ClaimerService
from slotflow_claimer.config import Settings

log = logging.getLogger("slotflow_claimer")


async def serve(settings: Settings) -> int:
    """Run until SIGTERM/SIGINT (graceful stop, exit 0) or a loop crashes (exit 1)."""
    claimer = ClaimerService(settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await claimer.start()  # with the metrics listener when SLOTFLOW_CLAIMER_METRICS_PORT is set
    waiters = [asyncio.create_task(stop.wait()), asyncio.create_task(claimer.fatal.wait())]
    await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    for waiter in waiters:
        waiter.cancel()
    failed = claimer.fatal.is_set()
    await claimer.stop()
    return 1 if failed else 0


def main() -> None:
    configure_logging()
    configure_tracing("slotflow-claimer")
    settings = Settings()
    if settings.claimer.event_loop == "uvloop":
        import uvloop

        sys.exit(uvloop.run(serve(settings)))
    sys.exit(asyncio.run(serve(settings)))


if __name__ == "__main__":
    main()
