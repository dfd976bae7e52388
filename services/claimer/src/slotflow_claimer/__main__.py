"""`python -m slotflow_claimer` (console script `slotflow-claimer`): run one claimer until SIGTERM.

SIGTERM or SIGINT stops it gracefully (exit 0); a crashed loop stops it too (exit 1).
"""

import sys

from slotflow.logs import configure_logging
from slotflow.service import serve
from slotflow.tracing import configure_tracing
from slotflow_claimer.app import ClaimerService
from slotflow_claimer.config import Settings


def main() -> None:
    configure_logging()
    configure_tracing("slotflow-claimer")
    settings = Settings()
    # With the metrics listener when SLOTFLOW_CLAIMER_METRICS_PORT is set.
    sys.exit(
        serve("slotflow-claimer", lambda: ClaimerService(settings), event_loop=settings.claimer.event_loop)
    )


if __name__ == "__main__":
    main()
