"""Every security protocol and SASL mechanism slotflow supports, against the real broker.

One broker for the module, started through deploy/devstack in its sasl_ssl mode with the test
listeners (SLOTFLOW_DEVSTACK_KAFKA_MECHANISM_PORTS): SASL_SSL with PLAIN, SCRAM-SHA-256,
SCRAM-SHA-512 and OAUTHBEARER (unsigned tokens, Kafka's default unsecured validator); SASL_PLAINTEXT
with PLAIN and SCRAM; SSL with a client certificate required, signed by the devstack's CA, whose CN
is the principal. StandardAuthorizer allows nothing without an ACL, so every case also shows that
the broker saw the principal the client meant to be.

For each case: a slotflow Producer (idempotent, acks=all) sends as User:cli, a Consumer
(read_committed, in a group) and a TopicReader read the record back, with exactly the ACLs the
test grants; a topic without an ACL is refused with KafkaAccessDenied; a wrong credential
(password, expired token, missing or foreign client certificate) fails with
KafkaAuthenticationFailed. The ticker, as a real process, starts and serves over OAUTHBEARER (its
token from a `module:function` provider) and over mutual TLS.
"""

import asyncio
import dataclasses
import gc
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from slotflow.contracts import CreateSchedule, OnceSpec, ScheduleDefinition
from slotflow.contracts.topics import JOBS_DUE, RUN_EVENTS, SCHEDULE_COMMANDS
from slotflow.errors import KafkaAccessDenied, KafkaAuthenticationFailed
from slotflow.kafka.acls import AclBinding, Operation, ResourceType, create_acls, service_acls
from slotflow.kafka.admin import ensure_topics, warm_coordinators
from slotflow.kafka.consumer import Consumer
from slotflow.kafka.producer import Producer
from slotflow.kafka.reading import TopicReader
from slotflow.kafka.records import Record
from slotflow.kafka.security import KafkaSecurity
from slotflow.pg.pool import Pool, create_pool
from slotflow.settings import KafkaSettings, PostgresSettings
from slotflow.testing import unique_name
from slotflow.testing.processes import ProcessGroup, ServiceProcess, free_port, stack_env
from tests.integration.claimer.support import REPO
from tests.integration.security.devstack_module import load_devstack
from tests.integration.security.oauth_tokens import SUBJECT_ENV, unsecured_jws
from tests.integration.ticker.support import db_now, send

TOKEN_PROVIDER = "tests.integration.security.oauth_tokens:token"
#: The principal of every case: a user of the devstack (PLAIN and SCRAM need its password), the
#: subject of a token, the CN of a certificate. It is no super user: only the test's ACLs apply.
USER = "cli"
#: A refused client gives up within this (a probe after aiokafka's bootstrap attempt).
REFUSAL_S = 60.0


@dataclasses.dataclass(frozen=True)
class Case:
    protocol: str
    mechanism: str | None  # None: SSL with a client certificate

    @property
    def id(self) -> str:
        return f"{self.protocol}-{self.mechanism or 'client-certificate'}"


CASES = [
    Case("SASL_SSL", "PLAIN"),
    Case("SASL_SSL", "SCRAM-SHA-256"),
    Case("SASL_SSL", "SCRAM-SHA-512"),
    Case("SASL_SSL", "OAUTHBEARER"),
    Case("SASL_PLAINTEXT", "PLAIN"),
    Case("SASL_PLAINTEXT", "SCRAM-SHA-256"),
    Case("SASL_PLAINTEXT", "SCRAM-SHA-512"),
    Case("SSL", None),
]


@dataclasses.dataclass(frozen=True)
class Broker:
    devstack: ModuleType
    cfg: Any
    #: Client certificates signed by the devstack's CA (CN=<user>): the certificate and its key.
    certificates: dict[str, tuple[Path, Path]]

    def bootstrap(self, protocol: str) -> str:
        ports = self.cfg.mechanism_listeners
        port = {"SASL_SSL": ports.sasl_ssl, "SASL_PLAINTEXT": ports.sasl_plaintext, "SSL": ports.mtls}[
            protocol
        ]
        return f"127.0.0.1:{port}"

    def admin(self, namespace: str) -> KafkaSettings:
        """The devstack's super user on its own SASL_SSL (SCRAM-SHA-512) listener."""
        security: KafkaSecurity = self.devstack.client_security(self.cfg, "admin")
        return KafkaSettings(bootstrap=str(self.cfg.bootstrap), topic_namespace=namespace, security=security)

    def security(self, case: Case, user: str = USER, **override: Any) -> KafkaSecurity:
        """``user``'s settings for ``case``; ``override`` replaces fields (a wrong credential)."""
        fields: dict[str, Any] = {"security_protocol": case.protocol, "sasl_mechanism": case.mechanism}
        if case.protocol in ("SASL_SSL", "SSL"):
            fields["ssl_cafile"] = self.cfg.kafka_ca_file
        if case.mechanism == "OAUTHBEARER":
            fields["sasl_oauth_token"] = unsecured_jws(user)
        elif case.mechanism is not None:
            fields["sasl_username"] = user
            fields["sasl_password"] = self.devstack.users(self.cfg)[user]
        else:
            fields["ssl_certfile"], fields["ssl_keyfile"] = self.certificates[user]
        fields.update(override)
        return KafkaSecurity(**fields)

    def settings(self, case: Case, namespace: str, security: KafkaSecurity | None = None) -> KafkaSettings:
        return KafkaSettings(
            bootstrap=self.bootstrap(case.protocol),
            topic_namespace=namespace,
            security=security or self.security(case),
        )


@pytest.fixture(scope="module")
def broker() -> Iterator[Broker]:
    devstack = load_devstack()
    state = tempfile.mkdtemp(prefix="slotflow-mechs-")
    cfg = dataclasses.replace(
        devstack.Config.from_env(),
        state_dir=Path(state),
        kafka_port=free_port(),
        controller_port=free_port(),
        kafka_security="sasl_ssl",
        mechanism_listeners=devstack.MechanismListeners(free_port(), free_port(), free_port()),
    )
    asyncio.run(devstack.start_kafka(cfg))
    try:
        certificates = {
            user: asyncio.run(devstack.client_certificate(cfg, user)) for user in (USER, "ticker")
        }
        yield Broker(devstack, cfg, certificates)
    finally:
        asyncio.run(devstack.stop_kafka(False, cfg))
        shutil.rmtree(state, ignore_errors=True)


async def _grant(broker: Broker, namespace: str, group: str) -> tuple[str, str]:
    """Two topics in a fresh namespace: User:cli may write, read and describe the first and read
    ``group``; the second it may not touch. Returns (allowed, forbidden)."""
    admin = broker.admin(namespace)
    allowed, forbidden = admin.topic(SCHEDULE_COMMANDS), admin.topic(RUN_EVENTS)
    specs = [s for s in admin.topics() if s.name in (allowed, forbidden)]
    await ensure_topics(admin.bootstrap, specs, security=admin.security)
    principal = f"User:{USER}"
    bindings = [
        *(AclBinding(principal, ResourceType.TOPIC, allowed, op) for op in (Operation.WRITE, Operation.READ, Operation.DESCRIBE)),
        AclBinding(principal, ResourceType.GROUP, group, Operation.READ),
    ]  # fmt: skip
    await create_acls(admin.bootstrap, bindings, security=admin.security)
    return allowed, forbidden


def _payload(marker: bytes) -> Any:
    def match(record: Record) -> bytes | None:
        return record.value if record.value == marker else None

    return match


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
async def test_a_principal_sends_and_reads_back_with_only_its_acls(broker: Broker, case: Case) -> None:
    namespace, group = unique_name("mech"), unique_name("mech-group")
    allowed, forbidden = await _grant(broker, namespace, group)
    await warm_coordinators(broker.admin(namespace).bootstrap, security=broker.admin(namespace).security)
    kafka = broker.settings(case, namespace)
    marker = f"sent over {case.id}".encode()
    async with asyncio.timeout(90):
        async with Producer(kafka, client_id="mech-test") as producer:
            delivered = await producer.send_raw(allowed, key=b"k", value=marker)
            with pytest.raises(KafkaAccessDenied, match=rf"{forbidden}|TopicAuthorizationFailed"):
                await producer.send_raw(forbidden, key=b"k", value=b"nope")
        got: list[Record] = []
        async with Consumer(kafka, allowed, group_id=group, client_id="mech-test") as consumer:
            while not got:
                got = [r for r in await consumer.poll(timeout_ms=500) if r.value == marker]
            await consumer.commit(got)
        reader = TopicReader(kafka, allowed, client_id="mech-reader")
        await reader.start()
        try:
            found = await reader.find({}, _payload(marker), timeout=20)
        finally:
            await reader.stop()
    assert (got[0].partition, got[0].offset) == (delivered.partition, delivered.offset)
    assert found == marker


async def _wrong_credentials(broker: Broker, case: Case, tmp_path: Path) -> list[tuple[str, KafkaSecurity]]:
    if case.mechanism == "OAUTHBEARER":
        expired = unsecured_jws(USER, lifetime_s=-600, issued_at=None)
        return [("an expired token", broker.security(case, sasl_oauth_token=expired))]
    if case.mechanism is not None:
        return [("a wrong password", broker.security(case, sasl_password="not-the-password"))]
    foreign_cert, foreign_key = await _foreign_certificate(tmp_path, USER)
    return [
        ("no client certificate", broker.security(case, ssl_certfile=None, ssl_keyfile=None)),
        ("a certificate of another CA", broker.security(case, ssl_certfile=foreign_cert, ssl_keyfile=foreign_key)),
    ]  # fmt: skip


async def _openssl(*args: str) -> None:
    proc = await asyncio.create_subprocess_exec(
        "openssl", *args, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE
    )
    _, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()


async def _foreign_certificate(directory: Path, user: str) -> tuple[Path, Path]:
    """A client certificate for CN=``user`` from a CA the broker does not trust."""
    ca_key, ca, key, csr, cert = (directory / n for n in ("ca.key", "ca.pem", "c.key", "c.csr", "c.pem"))
    await _openssl("req", "-x509", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", str(ca_key),
                   "-out", str(ca), "-days", "2", "-subj", "/CN=another CA")  # fmt: skip
    await _openssl("req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr),
                   "-subj", f"/CN={user}")  # fmt: skip
    await _openssl("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key), "-CAcreateserial",
                   "-out", str(cert), "-days", "2")  # fmt: skip
    return cert, key


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
# aiokafka (0.14) leaves the socket of a refused SASL_PLAINTEXT bootstrap connection unclosed; the
# garbage collector reports it later as an unraisable ResourceWarning, from the transport's __del__
# or from the socket's own. Only those reports are ignored here, and only in this test (the test
# collects its garbage before it ends, so no later test inherits the report); the refusal itself is
# still asserted.
@pytest.mark.filterwarnings(
    r"ignore:Exception ignored in. <function _SelectorTransport.__del__:pytest.PytestUnraisableExceptionWarning"
)
@pytest.mark.filterwarnings(
    r"ignore:Exception ignored in. <socket.socket:pytest.PytestUnraisableExceptionWarning"
)
async def test_a_wrong_credential_is_refused_and_says_so(broker: Broker, case: Case, tmp_path: Path) -> None:
    for what, security in await _wrong_credentials(broker, case, tmp_path):
        kafka = broker.settings(case, unique_name("mech"), security)
        with pytest.raises(KafkaAuthenticationFailed) as refused:
            async with asyncio.timeout(REFUSAL_S):
                await Producer(kafka, client_id="wrong").start()
        message = str(refused.value)
        assert f"({case.protocol}) refused the" in message, (what, message)
        assert "not-the-password" not in message
    gc.collect()


@pytest.fixture
async def db(pg_dsn: str) -> AsyncIterator[Pool]:
    pool = await create_pool(PostgresSettings(dsn=pg_dsn), min_size=1, max_size=2)
    yield pool
    await pool.close()


@pytest.mark.parametrize("case", [Case("SASL_SSL", "OAUTHBEARER"), Case("SSL", None)], ids=lambda c: c.id)
async def test_the_ticker_serves_over(
    broker: Broker, case: Case, pg_dsn: str, db: Pool, tmp_path: Path
) -> None:
    """The ticker process as User:ticker with its ACLs: over OAUTHBEARER its token comes from the
    `module:function` provider at every login; over SSL its certificate is CN=ticker."""
    namespace = unique_name("mech")
    admin = broker.admin(namespace)
    await ensure_topics(admin.bootstrap, admin.topics(), security=admin.security)
    await warm_coordinators(admin.bootstrap, security=admin.security)
    await create_acls(admin.bootstrap, service_acls("ticker", "User:ticker", admin), security=admin.security)
    if case.mechanism == "OAUTHBEARER":
        security = broker.security(
            case, "ticker", sasl_oauth_token=None, sasl_oauth_token_provider=TOKEN_PROVIDER
        )
    else:
        security = broker.security(case, "ticker")
    port = free_port()
    env = stack_env(
        broker.settings(case, namespace, security), pg_dsn, "SLOTFLOW_TICKER_",
        metrics_port=port, ticker_id=unique_name("tk"), backlog_seconds=0.5,
    )  # fmt: skip
    env.update({"PYTHONPATH": str(REPO), SUBJECT_ENV: "ticker"})
    group = ProcessGroup()
    try:
        ticker = await group.start(
            ServiceProcess(
                "slotflow_ticker", "ticker", env=env, log_dir=tmp_path, cwd=REPO, metrics_port=port
            )
        )
        schedule = unique_name("mech-due")
        slot = (await db_now(db)).replace(microsecond=0) + timedelta(seconds=1)
        async with Producer(admin, client_id="mech-test") as producer:
            definition = ScheduleDefinition(spec=OnceSpec(at=slot), handler="mech.noop")
            await send(producer, admin, CreateSchedule(schedule_id=schedule, definition=definition))
        reader = TopicReader(admin, admin.topic(JOBS_DUE), client_id="mech-due")
        await reader.start()
        try:
            due = await reader.find(
                {}, lambda r: r if r.value and schedule.encode() in r.value else None, timeout=60
            )
        finally:
            await reader.stop()
        assert due is not None, ticker.log()
        assert ticker.alive(), ticker.log()
    finally:
        group.close()
