"""`python -m slotflow_dlq` (console script `slotflow-dlq`): run one DLQ service replica.

SIGTERM or SIGINT stops it gracefully: the batches in hand are finished and committed, then every
connection is closed (exit 0). Anything staged but not yet published is published by the next
start. A crashed loop stops it too (exit 1).
"""

import sys

from slotflow.logs import configure_logging
from slotflow.service import serve
from slotflow.tracing import configure_tracing
from slotflow_dlq.app import DlqService
from slotflow_dlq.config import Settings


def main() -> int:
    configure_logging()
    configure_tracing("slotflow-dlq")
    settings = Settings()
    return serve("slotflow-dlq", lambda: DlqService(settings), event_loop=settings.dlq.event_loop)


if __name__ == "__main__":
    sys.exit(main())
