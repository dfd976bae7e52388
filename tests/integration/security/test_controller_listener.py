"""The secured devstack's controller listener takes the admin only: a client without credentials
cannot create ACLs there (nor anything else), and the broker still reaches its controller.

A broker of this module's own, started through deploy/devstack in its sasl_ssl mode on free
ports. Before: the controller listener was PLAINTEXT with User:ANONYMOUS a super user (the broker
reached its controller that way), so anyone who reached the port had CreateAcls: an ACL granting
`User:intruder` everything on the cluster was created and enforced.
"""

import asyncio
import dataclasses
import shutil
import ssl
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from aiokafka.conn import create_conn
from aiokafka.errors import KafkaConnectionError, KafkaError

from slotflow.kafka.acls import AclBinding, Operation, PatternType, ResourceType, create_acls, described_acls
from slotflow.kafka.admin import ensure_topics
from slotflow.kafka.producer import Producer
from slotflow.kafka.security import KafkaSecurity
from slotflow.settings import KafkaSettings
from slotflow.testing import unique_name
from slotflow.testing.processes import free_port
from tests.integration.security.devstack_module import load_devstack

INTRUDER = AclBinding(
    principal="User:intruder",
    resource_type=ResourceType.CLUSTER,
    resource_name="kafka-cluster",
    operation=Operation.ALL,
    pattern_type=PatternType.LITERAL,
)


@dataclasses.dataclass(frozen=True)
class Broker:
    devstack: ModuleType
    cfg: Any

    def admin(self) -> KafkaSecurity:
        security: KafkaSecurity = self.devstack.admin_security(self.cfg)
        return security


@pytest.fixture(scope="module")
def broker() -> Iterator[Broker]:
    devstack = load_devstack()
    state = tempfile.mkdtemp(prefix="slotflow-controller-")
    cfg = dataclasses.replace(
        devstack.Config.from_env(),
        state_dir=Path(state),
        kafka_port=free_port(),
        controller_port=free_port(),
        kafka_security="sasl_ssl",
    )
    asyncio.run(devstack.start_kafka(cfg))
    try:
        yield Broker(devstack, cfg)
    finally:
        asyncio.run(devstack.stop_kafka(False, cfg))
        shutil.rmtree(state, ignore_errors=True)


async def _create_acl_unauthenticated(port: int, **options: Any) -> Any:
    """CreateAcls sent straight to the controller's port (no Metadata first: a controller serves
    the admin requests of KIP-919 only), as a client without credentials."""
    from slotflow.kafka.acls import _CreateAclsRequest  # the request slotflow's create_acls sends

    conn = await create_conn("127.0.0.1", port, request_timeout_ms=5000, **options)
    try:
        return await conn.send(_CreateAclsRequest([INTRUDER]))
    finally:
        conn.close()


async def test_a_client_without_credentials_cannot_create_acls_on_the_controller(broker: Broker) -> None:
    port = broker.cfg.controller_port
    # As PLAINTEXT (what the listener was): the TLS listener drops it before any request.
    with pytest.raises((KafkaConnectionError, KafkaError, OSError, TimeoutError)):
        await asyncio.wait_for(_create_acl_unauthenticated(port), timeout=15)
    # Over TLS with the devstack's CA, still without SASL credentials: refused at the handshake.
    context = ssl.create_default_context(cafile=str(broker.cfg.kafka_ca_file))
    with pytest.raises((KafkaConnectionError, KafkaError, OSError, TimeoutError)):
        await asyncio.wait_for(
            _create_acl_unauthenticated(port, ssl_context=context, security_protocol="SSL"), timeout=15
        )
    # Nothing was created: the broker's authoriser knows no ACL for the intruder.
    assert await described_acls(broker.cfg.bootstrap, "User:intruder", security=broker.admin()) == set()


async def test_the_broker_still_reaches_its_controller(broker: Broker) -> None:
    # Topic creation and ACL creation go through the controller (the broker forwards them), and a
    # record is produced: the broker-to-controller path authenticates as the admin.
    admin = KafkaSettings(
        bootstrap=broker.cfg.bootstrap, topic_namespace=unique_name("ctl"), security=broker.admin()
    )
    await ensure_topics(admin.bootstrap, admin.topics(), security=admin.security)
    binding = dataclasses.replace(INTRUDER, principal="User:cli", operation=Operation.DESCRIBE)
    await create_acls(admin.bootstrap, [binding], security=admin.security)
    async with Producer(admin, client_id="controller-test") as producer:
        topic = admin.topics()[0].name  # already in the namespace
        delivered = await producer.send_raw(topic, key=b"k", value=b"{}")
        assert delivered.offset >= 0
