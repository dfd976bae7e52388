"""Which Kafka and PostgreSQL the test session uses, chosen by one setting: SLOTFLOW_TEST_STACK.

- `devstack` (the default): what `deploy/devstack/up.sh` started and exported
  (SLOTFLOW_KAFKA_BOOTSTRAP / SLOTFLOW_PG_DSN, or their loopback defaults). `make test` uses it.
- `testcontainers`: a Kafka container (KRaft) and a PostgreSQL container started by
  testcontainers-python for the session and removed after it, from the two images
  deploy/containers/build-images.sh builds locally (named by SLOTFLOW_TEST_KAFKA_IMAGE and
  SLOTFLOW_TEST_POSTGRES_IMAGE). Needs a Docker-compatible engine (DOCKER_HOST, or
  /var/run/docker.sock; deploy/containers/engine.sh starts podman's); chosen without one, the
  session fails and says so, never skips.
- `external`: an existing cluster given by SLOTFLOW_KAFKA_BOOTSTRAP and SLOTFLOW_PG_DSN (both
  required, so a forgotten variable cannot silently mean the devstack).

Every integration and chaos test reads the broker and database only through the session's
settings, so the same tests run on each.
"""

import asyncio
import os
import socket
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

from slotflow.contracts.topics import TOPICS
from slotflow.kafka.admin import ensure_topics, warm_coordinators

STACK_VARIABLE = "SLOTFLOW_TEST_STACK"
CHOICES = ("devstack", "testcontainers", "external")
DOCKER_SOCKET = "/var/run/docker.sock"
#: The images of the container path, built by deploy/containers/build-images.sh (which prints both).
KAFKA_IMAGE_VARIABLE = "SLOTFLOW_TEST_KAFKA_IMAGE"
POSTGRES_IMAGE_VARIABLE = "SLOTFLOW_TEST_POSTGRES_IMAGE"
#: What the images log once they serve (deploy/containers/*-entrypoint.sh start them).
KAFKA_READY_LOG = "Kafka Server started"
POSTGRES_READY_LOG = "database system is ready to accept connections"
CONTAINER_START_TIMEOUT_S = 120


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
    if value == "testcontainers":
        missing = [name for name in (KAFKA_IMAGE_VARIABLE, POSTGRES_IMAGE_VARIABLE) if not env.get(name)]
        if missing:
            raise StackUnavailable(
                f"{STACK_VARIABLE}=testcontainers needs {' and '.join(missing)}: "
                "deploy/containers/build-images.sh builds both images and prints them (make test-containers)"
            )
    if value == "external":
        missing = [name for name in ("SLOTFLOW_KAFKA_BOOTSTRAP", "SLOTFLOW_PG_DSN") if not env.get(name)]
        if missing:
            raise StackUnavailable(f"{STACK_VARIABLE}=external needs {' and '.join(missing)}")
    return value


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def _set_up_kafka(bootstrap: str) -> None:
    await ensure_topics(bootstrap, TOPICS)
    await warm_coordinators(bootstrap)


@contextmanager
def testcontainers_stack(env: Mapping[str, str]) -> Iterator[Endpoints]:
    """Start Kafka and PostgreSQL containers for the session; stop and remove them after."""
    # Imported here: the default path must not need testcontainers (or the docker SDK) to load.
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.wait_strategies import LogMessageWaitStrategy

    # A broker advertises the address clients must use: it listens on the same port inside the
    # container as on the host, so the advertised 127.0.0.1:<port> is right on both sides.
    kafka_port = _free_port()
    kafka = (
        DockerContainer(env[KAFKA_IMAGE_VARIABLE])
        .with_env("KAFKA_PORT", str(kafka_port))
        .with_bind_ports(kafka_port, kafka_port)
        .waiting_for(LogMessageWaitStrategy(KAFKA_READY_LOG).with_startup_timeout(CONTAINER_START_TIMEOUT_S))
    )
    postgres = (
        DockerContainer(env[POSTGRES_IMAGE_VARIABLE])
        .with_env("POSTGRES_USER", "slotflow")
        .with_env("POSTGRES_PASSWORD", "slotflow")
        # Trust over TCP, as the devstack's loopback cluster: the DSN carries no password, so no
        # common word becomes a secret every log line masks, and tests may set passwords of their own.
        .with_env("POSTGRES_HOST_AUTH_METHOD", "trust")
        .with_env("POSTGRES_DB", "slotflow")
        .with_exposed_ports(5432)
        .waiting_for(
            LogMessageWaitStrategy(POSTGRES_READY_LOG).with_startup_timeout(CONTAINER_START_TIMEOUT_S)
        )
    )
    with kafka, postgres:
        bootstrap = f"127.0.0.1:{kafka_port}"
        # As the devstack does after its broker starts: every topic, then the coordinators' own.
        asyncio.run(_set_up_kafka(bootstrap))
        host = postgres.get_container_host_ip()
        port = postgres.get_exposed_port(5432)
        yield Endpoints("testcontainers", bootstrap, f"postgresql://slotflow@{host}:{port}/slotflow")


@contextmanager
def session_stack(
    env: Mapping[str, str] | None = None, exists: Callable[[str], bool] = os.path.exists
) -> Iterator[Endpoints]:
    """The chosen stack for as long as the session runs."""
    chosen_env = os.environ if env is None else env
    stack = choose(chosen_env, docker=docker_engine_available(chosen_env, exists))
    if stack == "testcontainers":
        with testcontainers_stack(chosen_env) as endpoints:
            yield endpoints
        return
    yield Endpoints(stack)
