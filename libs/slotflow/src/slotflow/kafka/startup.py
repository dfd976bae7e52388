"""Wait for Kafka at start-up, as a service waits for PostgreSQL (`slotflow.pg.pool.wait_for_pool`).

A service started while its broker restarts, or while the network to it is down for a moment,
used to fail its first bootstrap and exit: a replica lost wherever nothing restarts it, and a
restart (with a consumer-group rebalance) wherever something does. Every client this library
starts (`Producer`, `Consumer`, the topic readers) first waits until a bootstrap succeeds, for up
to `KafkaSettings.startup_wait_seconds`. A refused login, TLS handshake or ACL is no outage: it
raises at once, as before.
"""

import asyncio
import logging
import random
from typing import Any

from aiokafka.client import AIOKafkaClient
from aiokafka.errors import KafkaError

from slotflow.errors import TransientStorageError
from slotflow.kafka.access import start_failure
from slotflow.settings import KafkaSettings

log = logging.getLogger(__name__)

#: Full-jitter back-off between bootstrap tries: 0.1 s doubling, capped here.
_MAX_DELAY_S = 5.0


async def wait_for_kafka(settings: KafkaSettings, what: str, *, rng: random.Random | None = None) -> None:
    """Return once a bootstrap with ``settings`` succeeds; ``what`` names the client in the log.

    Raises:
        KafkaAuthenticationFailed, KafkaAccessDenied: the broker refused the login or an ACL.
        TransientStorageError: no broker answered within ``settings.startup_wait_seconds``.
    """
    if settings.startup_wait_seconds <= 0:
        # Nothing to wait for: the client's own start fails at once, with the same reasons, and
        # a caller that never waits (the Python client, the CLI) pays no extra connection.
        return
    draw = (rng or random.Random()).random  # noqa: S311 - jitter, not secrets
    loop = asyncio.get_running_loop()
    deadline = loop.time() + settings.startup_wait_seconds
    attempt = 0
    while True:
        client: Any = AIOKafkaClient(
            **settings.client_options(), client_id=f"{settings.client_id_prefix}-probe"
        )
        try:
            await client.bootstrap()
            return
        except KafkaError as err:
            failure = await start_failure(settings.bootstrap, settings.security, err, what)
            left = deadline - loop.time()
            if not isinstance(failure, TransientStorageError) or left <= 0:
                raise failure from err
            delay = min(left, draw() * min(_MAX_DELAY_S, 0.1 * 2 ** min(attempt, 10)))
            attempt += 1
            log.warning(
                "%s: Kafka not reachable yet (try %d), retrying in %.2f s: %s", what, attempt, delay, err
            )
            await asyncio.sleep(delay)
        finally:
            await client.close()
