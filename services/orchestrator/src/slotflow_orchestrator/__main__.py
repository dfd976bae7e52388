"""`python -m slotflow_orchestrator` (console script `slotflow-orchestrator`): run one orchestrator.

SIGTERM or SIGINT stops it gracefully: the poll in hand is recorded and committed, decisions in
flight commit, the outbox is flushed as far as the relay gets, and the shard leases are released.
A SIGKILL loses nothing either: every decision is one transaction, and inputs not yet recorded
are redelivered by Kafka.
"""

import asyncio
import signal
import sys

from slotflow.logs import configure_logging
from slotflow.tracing import configure_tracing
from slotflow_orchestrator.app import OrchestratorService
from slotflow_orchestrator.config import Settings
from slotflow_orchestrator.runtime import load_decider


async def _serve(settings: Settings) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    cfg = settings.orchestrator
    decider = load_decider(cfg.modules(), max_history_events=cfg.max_history_events)
    await OrchestratorService(settings, decider=decider).run(stop)


def main() -> int:
    configure_logging()
    configure_tracing("slotflow-orchestrator")
    settings = Settings()
    if settings.orchestrator.event_loop == "uvloop":
        import uvloop

        uvloop.run(_serve(settings))
    else:
        asyncio.run(_serve(settings))
    return 0


if __name__ == "__main__":
    sys.exit(main())
