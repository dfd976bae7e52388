"""Markers by directory, and fixtures for the real Kafka and PostgreSQL.

Integration tests never fake the broker or the database, and never skip for want of them: when
they are unreachable the test fails with a message naming `make up`, so a run without the stack
cannot pass by doing nothing.
"""

import asyncio
import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import pytest
from hypothesis import settings
from xdist.remote import Producer
from xdist.scheduler import LoadScopeScheduling

from slotflow.kafka.security import KafkaSecurity
from slotflow.pg.migrations import MigrationSource
from slotflow.pg.pool import Pool, create_pool
from slotflow.settings import KafkaSettings, PostgresSettings
from slotflow.testing import assert_eventually, unique_name
from tests.stack import Endpoints, StackUnavailable, session_stack

TESTS = Path(__file__).parent
LAYERS = ("unit", "integration", "chaos", "contracts")
TEST_PARTITIONS = 3

# No per-example deadline: speed belongs in bench/, and on a shared or loaded machine a property
# test that took 250 ms for one example proves nothing about the code, and failed the unit layer on a loaded box.
settings.register_profile("slotflow", deadline=None)
settings.load_profile("slotflow")


#: Tests that start brokers or databases of their own (marker `own_stack`). Under `make test`
#: (pytest-xdist, `--dist loadgroup`) they form one group, run in order on one worker: on a shared
#: worker xdist interleaved them with other modules, so the three-broker cluster (a module fixture on
#: ports searched from a fixed range) was stopped and started again between its tests and met its
#: own predecessor's ports, and on two workers at once two clusters met on those ports.
OWN_STACKS = ("integration/security/", "integration/kafka/test_three_brokers.py")

#: The groups `make test` runs one test after another on one worker, beside the other workers:
#: the chaos layer (it times kills and pauses against leases and sessions, so never two at once),
#: and the own-stack tests. By path, not by mark: xdist's own `xdist_group` names each test
#: `node@group` through an attribute pytest 9 no longer reads, so its groups never formed.
SERIAL_GROUPS = {"chaos": ("tests/chaos/",), "own_stack": tuple(f"tests/{path}" for path in OWN_STACKS)}


def pytest_itemcollected(item: pytest.Item) -> None:
    relative = Path(str(item.path)).relative_to(TESTS)
    layer = relative.parts[0]
    if layer in LAYERS:
        item.add_marker(getattr(pytest.mark, layer))
    if relative.as_posix().startswith(OWN_STACKS):
        item.add_marker(pytest.mark.own_stack)


class SerialGroupScheduling(LoadScopeScheduling):  # type: ignore[misc]  # xdist is untyped
    """xdist's load scheduling, each test its own unit, but each of SERIAL_GROUPS one unit."""

    def _split_scope(self, nodeid: str) -> str:
        for group, prefixes in SERIAL_GROUPS.items():
            if nodeid.startswith(prefixes):
                return group
        return nodeid


def pytest_xdist_make_scheduler(config: pytest.Config, log: Producer) -> SerialGroupScheduling | None:
    """`--dist loadgroup` is SerialGroupScheduling here; any other mode is xdist's own."""
    return SerialGroupScheduling(config, log) if config.getvalue("dist") == "loadgroup" else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # The whole-system fault suite starts its own Kafka and PostgreSQL and runs for minutes; it
    # runs only when asked for by name (`-m system`, as `make chaos` does), never inside `make test`.
    if "system" not in (config.option.markexpr or ""):
        system = [i for i in items if i.get_closest_marker("system") is not None]
        if system:
            config.hook.pytest_deselected(items=system)
            items[:] = [i for i in items if i.get_closest_marker("system") is None]


def _reachable(host_port: str) -> bool:
    host, _, port = host_port.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=2):
            return True
    except OSError:
        return False


def _server_log_tail(name: str, lines: int = 30) -> str:
    """The end of the devstack's log for ``name`` (kafka, postgres), to say why it is not there."""
    log = TESTS.parent / ".devstack" / f"{name}.log"
    try:
        tail = log.read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        return ""
    return f"\nlast lines of the devstack's {log.name}:\n" + "\n".join(tail)


def _unavailable(what: str, log: str = "") -> None:
    pytest.fail(
        f"{what} is not reachable; run `make up` (or set SLOTFLOW_KAFKA_BOOTSTRAP / SLOTFLOW_PG_DSN)"
        + (_server_log_tail(log) if log else "")
    )


@pytest.fixture(scope="session")
def test_stack() -> Iterator[Endpoints]:
    """The session's Kafka and PostgreSQL, as SLOTFLOW_TEST_STACK chooses (tests/stack.py)."""
    try:
        with session_stack() as endpoints, pytest.MonkeyPatch.context() as patch:
            # Subprocesses (services under test) read the same two variables.
            if endpoints.kafka_bootstrap:
                patch.setenv("SLOTFLOW_KAFKA_BOOTSTRAP", endpoints.kafka_bootstrap)
            if endpoints.pg_dsn:
                patch.setenv("SLOTFLOW_PG_DSN", endpoints.pg_dsn)
            # A shell with the secured devstack's exports requires signed commands; the suite's
            # tests publish unsigned ones unless they test signing, and then they say so.
            patch.delenv("SLOTFLOW_COMMAND_SIGNATURES", raising=False)
            yield endpoints
    except StackUnavailable as err:
        pytest.fail(str(err))


@pytest.fixture(scope="session")
def kafka_settings(test_stack: Endpoints) -> KafkaSettings:
    settings = KafkaSettings()
    if not _reachable(settings.bootstrap.split(",")[0]):
        _unavailable(f"Kafka at {settings.bootstrap}", log="kafka")
    return settings


@pytest.fixture(scope="session")
def pg_settings(test_stack: Endpoints) -> PostgresSettings:
    settings = PostgresSettings()
    if not _reachable(_pg_host_port(settings.dsn)):
        _unavailable("PostgreSQL", log="postgres")
    return settings


def _pg_host_port(dsn: str) -> str:
    # postgresql://user@host:port/db
    rest = dsn.split("://", 1)[1].split("/", 1)[0].rsplit("@", 1)[-1]
    return rest if ":" in rest else f"{rest}:5432"


def _with_database(dsn: str, database: str) -> str:
    # The query first: it may hold paths (sslrootcert=/etc/...) whose slashes are not the path's.
    head, sep, query = dsn.partition("?")
    return f"{head.rsplit('/', 1)[0]}/{database}{sep}{query}"


#: Each service's schema as its app migrates it at start, under the name it has by default.
def _service_schemas() -> list[tuple[str, MigrationSource, dict[str, bool]]]:
    from slotflow_api.projector import MIGRATIONS as API
    from slotflow_claimer.app import MIGRATIONS as CLAIMER
    from slotflow_dlq.app import MIGRATIONS as DLQ
    from slotflow_orchestrator.app import MIGRATIONS as ORCHESTRATOR
    from slotflow_ticker.app import MIGRATIONS as TICKER

    return [
        ("ticker", TICKER, {}),
        ("claimer", CLAIMER, {}),
        ("orchestrator", ORCHESTRATOR, {"payloads": True}),
        ("dlq", DLQ, {}),
        ("api", API, {}),
    ]


async def _create_database(admin_dsn: str, name: str, template: str | None = None) -> None:
    admin = await asyncpg.connect(admin_dsn)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else ""))
    finally:
        await admin.close()


async def _drop_database(admin_dsn: str, name: str) -> None:
    admin = await asyncpg.connect(admin_dsn)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


async def _migrated_template(admin_dsn: str, name: str) -> None:
    from slotflow.service import migrate

    await _create_database(admin_dsn, name)
    pool = await create_pool(PostgresSettings(dsn=_with_database(admin_dsn, name)), min_size=1, max_size=1)
    try:
        for schema, source, options in _service_schemas():
            await migrate(pool, schema=schema, source=source, **options)
    finally:
        await pool.close()


@pytest.fixture(scope="session")
def pg_template(pg_settings: PostgresSettings) -> Iterator[str]:
    """A database with every service's schema migrated, made once per session: each test's
    database is a copy of it (CREATE DATABASE ... TEMPLATE), so a service starting in a test finds
    its migrations applied instead of applying them all again. A test that needs an empty database
    takes `empty_pg_dsn`."""
    name = unique_name("tmpl")
    asyncio.run(_migrated_template(pg_settings.dsn, name))
    yield name
    asyncio.run(_drop_database(pg_settings.dsn, name))


@pytest.fixture
async def pg_dsn(pg_settings: PostgresSettings, pg_template: str) -> AsyncIterator[str]:
    """A fresh database for one test, every service's schema migrated (a copy of `pg_template`),
    dropped afterwards."""
    name = unique_name("t")
    await _create_database(pg_settings.dsn, name, template=pg_template)
    yield _with_database(pg_settings.dsn, name)
    await _drop_database(pg_settings.dsn, name)


@pytest.fixture
async def empty_pg_dsn(pg_settings: PostgresSettings) -> AsyncIterator[str]:
    """A fresh, empty database for one test (no schema of any service), dropped afterwards."""
    name = unique_name("t")
    await _create_database(pg_settings.dsn, name)
    yield _with_database(pg_settings.dsn, name)
    await _drop_database(pg_settings.dsn, name)


@pytest.fixture
async def pg_pool(pg_dsn: str) -> AsyncIterator[Pool]:
    pool = await create_pool(PostgresSettings(dsn=pg_dsn), min_size=1, max_size=8)
    yield pool
    await pool.close()


@pytest.fixture
async def kafka(kafka_settings: KafkaSettings) -> AsyncIterator[KafkaSettings]:
    """Kafka settings in a fresh topic namespace with every topic of the table created.

    Services resolve topic names through `KafkaSettings.topic`, so tests running side by side on
    one broker never read each other's records. Test topics get at most 3 partitions (enough to
    spread work over several consumers) and are deleted afterwards, so a long suite does not
    leave the single broker carrying thousands of partitions.
    """
    from aiokafka.admin import AIOKafkaAdminClient

    from slotflow.kafka.admin import ensure_topics

    settings = kafka_settings.model_copy(update={"topic_namespace": unique_name("t")})
    specs = [
        s.model_copy(update={"partitions": min(s.partitions, TEST_PARTITIONS)}) for s in settings.topics()
    ]
    await ensure_topics(settings.bootstrap, specs, security=settings.security)
    await wait_for_leaders(
        settings.bootstrap, {s.name: s.partitions for s in specs}, security=settings.security
    )
    yield settings
    admin = AIOKafkaAdminClient(**settings.client_options())
    await admin.start()
    try:
        existing = await admin.list_topics()
        mine = [t for t in existing if t.startswith(f"{settings.topic_namespace}.")]
        if mine:
            await admin.delete_topics(mine)
    finally:
        await admin.close()


async def wait_for_leaders(
    bootstrap: str, partitions: dict[str, int], timeout: float = 60.0, security: KafkaSecurity | None = None
) -> None:
    """Block until every partition of the new topics has a leader.

    A loaded broker elects leaders for fresh partitions one by one; a test that produces before
    that only exercises NotLeaderForPartition retries.
    """
    from aiokafka import AIOKafkaClient
    from aiokafka.structs import TopicPartition

    security = KafkaSecurity() if security is None else security
    client = AIOKafkaClient(bootstrap_servers=bootstrap, **security.client_options())
    await client.bootstrap()
    try:

        async def all_led() -> bool:
            metadata = await client.fetch_all_metadata()
            return all(
                (metadata.leader_for_partition(TopicPartition(topic, p)) or -1) >= 0
                for topic, count in partitions.items()
                for p in range(count)
            )

        await assert_eventually(all_led, timeout=timeout, interval=0.2, message="partition leaders")
    finally:
        await client.close()
