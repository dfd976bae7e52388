"""Which Kafka and PostgreSQL the test session uses, chosen by one setting: SLOTFLOW_TEST_STACK.

- `devstack` (the default): what `deploy/devstack/up.sh` started and exported
  (SLOTFLOW_KAFKA_BOOTSTRAP / SLOTFLOW_PG_DSN, or their loopback defaults). `make test` uses it.
- `testcontainers`: a Kafka container (KRaft) and a PostgreSQL container started by
  testcontainers-python for the session and removed after it. Needs a Docker engine (DOCKER_HOST,
  or /var/run/docker.sock); chosen without one, the session fails and says so, never skips.
- `external`: an existing cluster given by SLOTFLOW_KAFKA_BOOTSTRAP and SLOTFLOW_PG_DSN (both
  required, so a forgotten variable cannot silently mean the devstack).

Every integration and chaos test reads the broker and database only through the session's
settings, so the same tests run on each.
"""

import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

STACK_VARIABLE = "SLOTFLOW_TEST_STACK"
CHOICES = ("devstack", "testcontainers", "external")
DOCKER_SOCKET = "/var/run/docker.sock"
#: Kafka 4.0 (Confluent's 8.0 build) in KRaft mode, and PostgreSQL 17, for the container path.
KAFKA_IMAGE = "confluentinc/cp-kafka:8.0.0"
POSTGRES_IMAGE = "postgres:17"


class StackUnavailable(Exception):
    """The chosen stack cannot be used here; the message says why and what to do."""


@dataclass(frozen=True)
class Endpoints:
    """What the session's settings get: None keeps the environment's (devstack) values."""

    stack: str
    kafka_bootstrap: str | None = None
    pg_dsn: str | None = None


def docker_engine_available(env: Mapping[str, str], exists: Callable[[str], bool] = os.path.exists) -> bool:
    """Whether testcontainers could reach a Docker engine (its own lookup: DOCKER_HOST first)."""
    return bool(env.get("DOCKER_HOST")) or exists(DOCKER_SOCKET)


def choose(env: Mapping[str, str], *, docker: bool) -> str:
    """The stack SLOTFLOW_TEST_STACK names, checked against what this machine has."""
    value = (env.get(STACK_VARIABLE) or "devstack").strip().lower()
    if value not in CHOICES:
        raise StackUnavailable(f"{STACK_VARIABLE}={value!r}: choose one of {', '.join(CHOICES)}")
    if value == "testcontainers" and not docker:
        raise StackUnavailable(
            f"{STACK_VARIABLE}=testcontainers needs a Docker engine, and there is none here "
            f"(DOCKER_HOST is unset and {DOCKER_SOCKET} does not exist); unset it to use the devstack"
        )
    if value == "external":
        missing = [name for name in ("SLOTFLOW_KAFKA_BOOTSTRAP", "SLOTFLOW_PG_DSN") if not env.get(name)]
        if missing:
            raise StackUnavailable(f"{STACK_VARIABLE}=external needs {' and '.join(missing)}")
    return value


@contextmanager
def testcontainers_stack() -> Iterator[Endpoints]:
    """Start Kafka and PostgreSQL containers for the session; stop and remove them after."""
    # Imported here: the default path must not need testcontainers (or the docker SDK) to load.
    from testcontainers.community.kafka import KafkaContainer
    from testcontainers.community.postgres import PostgresContainer

    # Topics are created by the tests themselves (as on the devstack, which refuses auto-creation).
    kafka = KafkaContainer(KAFKA_IMAGE).with_kraft().with_env("KAFKA_AUTO_CREATE_TOPICS_ENABLE", "false")
    postgres = PostgresContainer(
        POSTGRES_IMAGE, username="slotflow", password="slotflow", dbname="slotflow", driver=None
    )
    with kafka, postgres:
        yield Endpoints("testcontainers", kafka.get_bootstrap_server(), postgres.get_connection_url())


@contextmanager
def session_stack(
    env: Mapping[str, str] | None = None, exists: Callable[[str], bool] = os.path.exists
) -> Iterator[Endpoints]:
    """The chosen stack for as long as the session runs."""
    chosen_env = os.environ if env is None else env
    stack = choose(chosen_env, docker=docker_engine_available(chosen_env, exists))
    if stack == "testcontainers":
        with testcontainers_stack() as endpoints:
            yield endpoints
        return
    yield Endpoints(stack)
