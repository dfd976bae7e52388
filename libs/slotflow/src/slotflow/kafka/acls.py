"""The Kafka ACLs each slotflow service needs, and creating them through the Admin API.

`service_acls` derives one service's least privilege from the topic table
(`slotflow.contracts.topics`: which services produce and consume each topic) and from the consumer
groups the service joins; docs/security.md (Kafka) lists the result. `create_acls` sends them as
CreateAcls requests (API key 30). aiokafka 0.14 builds only versions 0 and 1 of that request, which
Kafka 4 no longer accepts (KIP-896), so version 3 (the flexible encoding) is declared here.

No service uses a transactional producer (events leave through the PostgreSQL outbox), so none
needs a TransactionalId ACL; the idempotent producers need no IdempotentWrite on the cluster either:
since Kafka 3.0 WRITE on a topic allows it (KIP-679).
"""

import asyncio
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from aiokafka import AIOKafkaClient
from aiokafka.errors import KafkaError, for_code
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import CompactArray, CompactString, Int8, Int16, Int32, Schema, TaggedFields

from slotflow.contracts.topics import DLQ_EVENTS, JOBS_DUE, RUN_EVENTS, SCHEDULE_EVENTS, TOPICS, TopicSpec
from slotflow.errors import PermanentError
from slotflow.kafka.access import start_failure
from slotflow.kafka.security import KafkaSecurity
from slotflow.settings import KafkaSettings


class ResourceType(IntEnum):
    """org.apache.kafka.common.resource.ResourceType codes."""

    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5


class PatternType(IntEnum):
    """org.apache.kafka.common.resource.PatternType codes."""

    LITERAL = 3
    PREFIXED = 4


class Operation(IntEnum):
    """org.apache.kafka.common.acl.AclOperation codes."""

    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12


#: AclPermissionType.ALLOW
_ALLOW = 3

#: The consumer groups each service joins, as prefixes (before the topic namespace): the service
#: settings' defaults (ticker `group_id`, claimer `group_id` and `downstream_commands_group_id`,
#: orchestrator `group_id`, dlq `messages_group`/`commands_group`, api `group_base`, stats
#: `app_name`). A deployment that changes one of those settings grants its own group instead.
SERVICE_GROUPS: dict[str, tuple[str, ...]] = {
    "ticker": ("slotflow.ticker",),
    "claimer": ("slotflow-claimer",),
    "orchestrator": ("slotflow-orchestrator",),
    "dlq": ("slotflow.dlq.",),
    "api": ("slotflow-api-projector.",),
    "stats": ("slotflow-stats",),
    "cli": (),
}

#: The stats worker (faust) is not in the topic table: it reads these event topics, and keeps each
#: table in a changelog topic of its own, `<app_id>-<table>-changelog`, that it creates and
#: reads back at start (services/stats: SOURCES, ensure_changelogs).
STATS_SOURCES = (RUN_EVENTS, JOBS_DUE, SCHEDULE_EVENTS, DLQ_EVENTS)
STATS_CHANGELOG_OPERATIONS = (Operation.CREATE, Operation.READ, Operation.WRITE)

#: Producers named in the topic table that stand for several services.
_EVERY_CONSUMER = "every consumer"


class AclCreationFailed(PermanentError):
    """The broker refused to create one or more ACLs."""


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ALLOW rule: ``principal`` may do ``operation`` on the resource (from any host)."""

    principal: str
    resource_type: ResourceType
    resource_name: str
    operation: Operation
    pattern_type: PatternType = PatternType.LITERAL
    host: str = "*"

    def __str__(self) -> str:
        pattern = "" if self.pattern_type is PatternType.LITERAL else " (prefix)"
        return (
            f"{self.principal} {self.operation.name} {self.resource_type.name}:{self.resource_name}{pattern}"
        )


def _consumes(spec: TopicSpec, service: str) -> bool:
    return service in spec.consumers


def _produces(spec: TopicSpec, service: str) -> bool:
    if service in spec.producers:
        return True
    # Every service that consumes parks poison on the DLQ topic.
    return _EVERY_CONSUMER in spec.producers and any(service in s.consumers for s in TOPICS)


def service_acls(service: str, principal: str, kafka: KafkaSettings) -> list[AclBinding]:
    """What ``service`` (ticker, claimer, orchestrator, dlq, api, stats, cli) needs, for ``principal``
    (e.g. ``User:claimer``), in the topic namespace of ``kafka``.

    Raises:
        ValueError: an unknown service.
    """
    if service not in SERVICE_GROUPS:
        raise ValueError(f"unknown service {service!r}; one of {', '.join(SERVICE_GROUPS)}")
    acls: list[AclBinding] = []
    for spec in TOPICS:
        name = kafka.topic(spec)
        if _consumes(spec, service):
            acls.append(AclBinding(principal, ResourceType.TOPIC, name, Operation.READ))
        if _produces(spec, service):
            acls.append(AclBinding(principal, ResourceType.TOPIC, name, Operation.WRITE))
    namespace = f"{kafka.topic_namespace}." if kafka.topic_namespace else ""
    if service == "stats":
        acls += [
            AclBinding(principal, ResourceType.TOPIC, kafka.topic(s), Operation.READ) for s in STATS_SOURCES
        ]
        acls += [
            AclBinding(principal, ResourceType.TOPIC, f"{namespace}{group}-", operation, PatternType.PREFIXED)
            for group in SERVICE_GROUPS[service]
            for operation in STATS_CHANGELOG_OPERATIONS
        ]
    for group in SERVICE_GROUPS[service]:
        acls.append(
            AclBinding(principal, ResourceType.GROUP, namespace + group, Operation.READ, PatternType.PREFIXED)
        )
    return acls


class _CreateAclsResponseV3(Response):  # type: ignore[misc]  # aiokafka is untyped
    API_KEY = 30
    API_VERSION = 3
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        (
            "results",
            CompactArray(
                ("error_code", Int16),
                ("error_message", CompactString("utf-8")),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


class _CreateAclsRequestV3(RequestStruct):  # type: ignore[misc]  # aiokafka is untyped
    FLEXIBLE_VERSION = True
    API_KEY = 30
    API_VERSION = 3
    RESPONSE_TYPE = _CreateAclsResponseV3
    SCHEMA = Schema(
        (
            "creations",
            CompactArray(
                ("resource_type", Int8),
                ("resource_name", CompactString("utf-8")),
                ("resource_pattern_type", Int8),
                ("principal", CompactString("utf-8")),
                ("host", CompactString("utf-8")),
                ("operation", Int8),
                ("permission_type", Int8),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


class _CreateAclsRequest(Request[_CreateAclsRequestV3]):  # type: ignore[misc]  # aiokafka is untyped
    API_KEY = 30

    def __init__(self, bindings: Sequence[AclBinding]) -> None:
        self._bindings = bindings

    def build(self, request_struct_class: type[_CreateAclsRequestV3]) -> _CreateAclsRequestV3:
        return request_struct_class(
            [
                (
                    int(b.resource_type),
                    b.resource_name,
                    int(b.pattern_type),
                    b.principal,
                    b.host,
                    int(b.operation),
                    _ALLOW,
                    {},
                )
                for b in self._bindings
            ],
            {},
        )


class _DescribeAclsResponseV3(Response):  # type: ignore[misc]  # aiokafka is untyped
    API_KEY = 29
    API_VERSION = 3
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("error_code", Int16),
        ("error_message", CompactString("utf-8")),
        (
            "resources",
            CompactArray(
                ("resource_type", Int8),
                ("resource_name", CompactString("utf-8")),
                ("pattern_type", Int8),
                (
                    "acls",
                    CompactArray(
                        ("principal", CompactString("utf-8")),
                        ("host", CompactString("utf-8")),
                        ("operation", Int8),
                        ("permission_type", Int8),
                        ("tags", TaggedFields),
                    ),
                ),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


class _DescribeAclsRequestV3(RequestStruct):  # type: ignore[misc]  # aiokafka is untyped
    FLEXIBLE_VERSION = True
    API_KEY = 29
    API_VERSION = 3
    RESPONSE_TYPE = _DescribeAclsResponseV3
    SCHEMA = Schema(
        ("resource_type_filter", Int8),
        ("resource_name_filter", CompactString("utf-8")),
        ("pattern_type_filter", Int8),
        ("principal_filter", CompactString("utf-8")),
        ("host_filter", CompactString("utf-8")),
        ("operation", Int8),
        ("permission_type", Int8),
        ("tags", TaggedFields),
    )


#: The ANY code of each DescribeAcls filter field (resource type, pattern type, operation, permission).
_ANY = 1


class _DescribeAclsRequest(Request[_DescribeAclsRequestV3]):  # type: ignore[misc]  # aiokafka is untyped
    """Every ACL of one principal (the broker answers from its own authoriser's view)."""

    API_KEY = 29

    def __init__(self, principal: str) -> None:
        self._principal = principal

    def build(self, request_struct_class: type[_DescribeAclsRequestV3]) -> _DescribeAclsRequestV3:
        return request_struct_class(_ANY, None, _ANY, self._principal, None, _ANY, _ANY, {})


def _described(response: Any) -> set[AclBinding]:
    if response.error_code:
        raise AclCreationFailed(
            f"DescribeAcls failed: {for_code(response.error_code).__name__}: {response.error_message or ''}"
        )
    found = set()
    for resource_type, name, pattern, acls, _tags in response.resources:
        for principal, host, operation, permission, _acl_tags in acls:
            if permission == _ALLOW:
                found.add(
                    AclBinding(
                        principal,
                        ResourceType(resource_type),
                        name,
                        Operation(operation),
                        PatternType(pattern),
                        host,
                    )
                )
    return found


async def create_acls(
    bootstrap: str,
    bindings: Iterable[AclBinding],
    *,
    security: KafkaSecurity,
    request_timeout_ms: int = 30_000,
    timeout_s: float = 30.0,
) -> None:
    """Create every ACL in ``bindings`` (an existing one is kept as it is), as a principal allowed to
    alter ACLs (a super user); return once the broker's authoriser enforces all of them.

    The controller commits new ACLs before the broker applies them from its metadata log, so a
    client let in right after CreateAcls answered could still be refused; DescribeAcls is answered
    from the broker's own view, so it is polled until every binding shows (``timeout_s``).

    Raises:
        AclCreationFailed: the broker refused one or more of them.
        KafkaAuthenticationFailed, KafkaAccessDenied, TransientStorageError: as a client start.
    """
    wanted = list(dict.fromkeys(bindings))
    if not wanted:
        return
    client: Any = AIOKafkaClient(
        bootstrap_servers=bootstrap,
        client_id="slotflow-acls",
        request_timeout_ms=request_timeout_ms,
        **security.client_options(),
    )
    try:
        try:
            await client.bootstrap()
            node_id: Any = client.get_random_node()
            response: Any = await client.send(node_id, _CreateAclsRequest(wanted))
            failures = [
                f"{binding}: {for_code(code).__name__}: {message or ''}"
                for binding, (code, message, _tags) in zip(wanted, response.results, strict=True)
                if code
            ]
            if failures:
                raise AclCreationFailed("cannot create Kafka ACLs: " + "; ".join(failures))
            await _until_enforced(client, node_id, wanted, timeout_s)
        except (TimeoutError, KafkaError, OSError) as err:
            raise await start_failure(bootstrap, security, err, "creating Kafka ACLs") from err
    finally:
        await client.close()


async def described_acls(
    bootstrap: str, principal: str, *, security: KafkaSecurity, request_timeout_ms: int = 30_000
) -> set[AclBinding]:
    """The ALLOW ACLs of ``principal`` the broker's authoriser enforces (DescribeAcls), asked as a
    principal allowed to describe them (a super user).

    Raises:
        AclCreationFailed: the broker refused the description.
        KafkaAuthenticationFailed, KafkaAccessDenied, TransientStorageError: as a client start.
    """
    client: Any = AIOKafkaClient(
        bootstrap_servers=bootstrap,
        client_id="slotflow-acls",
        request_timeout_ms=request_timeout_ms,
        **security.client_options(),
    )
    try:
        try:
            await client.bootstrap()
            return _described(await client.send(client.get_random_node(), _DescribeAclsRequest(principal)))
        except (TimeoutError, KafkaError, OSError) as err:
            raise await start_failure(bootstrap, security, err, "describing Kafka ACLs") from err
    finally:
        await client.close()


async def _until_enforced(client: Any, node_id: Any, wanted: Sequence[AclBinding], timeout_s: float) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    principals = sorted({b.principal for b in wanted})
    while True:
        found: set[AclBinding] = set()
        for principal in principals:
            found |= _described(await client.send(node_id, _DescribeAclsRequest(principal)))
        missing = [b for b in wanted if b not in found]
        if not missing:
            return
        if loop.time() >= deadline:
            raise AclCreationFailed(
                f"{len(missing)} created ACLs not enforced after {timeout_s:.0f} s, e.g. {missing[0]}"
            )
        await asyncio.sleep(0.1)
