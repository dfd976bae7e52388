"""Kafka administration: create slotflow's topics and describe the cluster.

Each call opens a short-lived connection, does its work and closes it again. These functions are for
start-up (the devstack, service boot, test fixtures), not for hot paths.

aiokafka ships no type information, so every value read from a response is checked and converted here.
A malformed response raises `UnexpectedKafkaResponse`; nothing here uses `assert`.
"""

import asyncio
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from aiokafka import AIOKafkaClient
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError, for_code
from aiokafka.protocol.admin import ApiVersionRequest
from aiokafka.protocol.metadata import MetadataRequest

from slotflow.contracts.topics import TopicSpec
from slotflow.errors import (
    KafkaAccessDenied,
    KafkaAuthenticationFailed,
    PermanentError,
    SlotflowError,
    TransientStorageError,
)
from slotflow.kafka.access import start_failure
from slotflow.kafka.security import KafkaSecurity

#: Kafka error code for TOPIC_ALREADY_EXISTS; an existing topic is left as it is.
TOPIC_ALREADY_EXISTS = 36

#: ensure_topics' replication factor when none is given: min(this, the cluster's brokers).
MAX_DEFAULT_REPLICATION = 3

#: Every Kafka API key and its name, as in org.apache.kafka.common.protocol.ApiKeys of Kafka 4.1.2.
#: Keys a later broker adds print as "api-<key>".
API_NAMES: Mapping[int, str] = {
    0: "Produce",
    1: "Fetch",
    2: "ListOffsets",
    3: "Metadata",
    4: "LeaderAndIsr",
    5: "StopReplica",
    6: "UpdateMetadata",
    7: "ControlledShutdown",
    8: "OffsetCommit",
    9: "OffsetFetch",
    10: "FindCoordinator",
    11: "JoinGroup",
    12: "Heartbeat",
    13: "LeaveGroup",
    14: "SyncGroup",
    15: "DescribeGroups",
    16: "ListGroups",
    17: "SaslHandshake",
    18: "ApiVersions",
    19: "CreateTopics",
    20: "DeleteTopics",
    21: "DeleteRecords",
    22: "InitProducerId",
    23: "OffsetForLeaderEpoch",
    24: "AddPartitionsToTxn",
    25: "AddOffsetsToTxn",
    26: "EndTxn",
    27: "WriteTxnMarkers",
    28: "TxnOffsetCommit",
    29: "DescribeAcls",
    30: "CreateAcls",
    31: "DeleteAcls",
    32: "DescribeConfigs",
    33: "AlterConfigs",
    34: "AlterReplicaLogDirs",
    35: "DescribeLogDirs",
    36: "SaslAuthenticate",
    37: "CreatePartitions",
    38: "CreateDelegationToken",
    39: "RenewDelegationToken",
    40: "ExpireDelegationToken",
    41: "DescribeDelegationToken",
    42: "DeleteGroups",
    43: "ElectLeaders",
    44: "IncrementalAlterConfigs",
    45: "AlterPartitionReassignments",
    46: "ListPartitionReassignments",
    47: "OffsetDelete",
    48: "DescribeClientQuotas",
    49: "AlterClientQuotas",
    50: "DescribeUserScramCredentials",
    51: "AlterUserScramCredentials",
    52: "Vote",
    53: "BeginQuorumEpoch",
    54: "EndQuorumEpoch",
    55: "DescribeQuorum",
    56: "AlterPartition",
    57: "UpdateFeatures",
    58: "Envelope",
    59: "FetchSnapshot",
    60: "DescribeCluster",
    61: "DescribeProducers",
    62: "BrokerRegistration",
    63: "BrokerHeartbeat",
    64: "UnregisterBroker",
    65: "DescribeTransactions",
    66: "ListTransactions",
    67: "AllocateProducerIds",
    68: "ConsumerGroupHeartbeat",
    69: "ConsumerGroupDescribe",
    70: "ControllerRegistration",
    71: "GetTelemetrySubscriptions",
    72: "PushTelemetry",
    73: "AssignReplicasToDirs",
    74: "ListConfigResources",
    75: "DescribeTopicPartitions",
    76: "ShareGroupHeartbeat",
    77: "ShareGroupDescribe",
    78: "ShareFetch",
    79: "ShareAcknowledge",
    80: "AddRaftVoter",
    81: "RemoveRaftVoter",
    82: "UpdateRaftVoter",
    83: "InitializeShareGroupState",
    84: "ReadShareGroupState",
    85: "WriteShareGroupState",
    86: "DeleteShareGroupState",
    87: "ReadShareGroupStateSummary",
    88: "StreamsGroupHeartbeat",
    89: "StreamsGroupDescribe",
    90: "DescribeShareGroupOffsets",
    91: "AlterShareGroupOffsets",
    92: "DeleteShareGroupOffsets",
}


class KafkaUnavailable(TransientStorageError):
    """No Kafka broker answered at the bootstrap address, or it kept answering 'try again'."""


class UnexpectedKafkaResponse(SlotflowError):
    """A Kafka response did not have the shape this module expects."""


class TopicCreationFailed(PermanentError):
    """The broker refused to create one or more topics."""

    def __init__(self, failures: Mapping[str, str]) -> None:
        self.failures: dict[str, str] = dict(failures)
        detail = "; ".join(f"{name}: {why}" for name, why in sorted(self.failures.items()))
        super().__init__(f"cannot create Kafka topics: {detail}")


@dataclass(frozen=True, slots=True)
class ApiVersionRange:
    """One API the broker supports and the range of versions it accepts (ApiVersions response)."""

    api_key: int
    min_version: int
    max_version: int

    @property
    def name(self) -> str:
        return API_NAMES.get(self.api_key, f"api-{self.api_key}")


@dataclass(frozen=True, slots=True)
class ClusterInfo:
    """What one broker reports about its cluster."""

    cluster_id: str | None
    controller_id: int | None
    broker_ids: tuple[int, ...]
    #: The ApiVersions the answering broker reports, sorted by API key. aiokafka sends, per API, the
    #: highest version it implements inside the broker's range.
    api_versions: tuple[ApiVersionRange, ...]
    #: Partition count of every topic that is not internal, by name (read-only).
    topic_partitions: Mapping[str, int]

    def api(self, name: str) -> ApiVersionRange | None:
        """The version range of the API called `name` (e.g. "Produce"), or None if not reported."""
        return next((a for a in self.api_versions if a.name == name), None)


def _int(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise UnexpectedKafkaResponse(f"{what}: expected an integer, got {value!r}")
    return value


def _str_or_none(value: object, what: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise UnexpectedKafkaResponse(f"{what}: expected a string, got {value!r}")


def _seq(value: object, what: str) -> list[Any]:
    if not isinstance(value, list | tuple):
        raise UnexpectedKafkaResponse(f"{what}: expected a list, got {type(value).__name__}")
    return list(value)


def _mapping(value: object, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise UnexpectedKafkaResponse(f"{what}: expected a mapping, got {type(value).__name__}")
    return value


def _error_name(code: int) -> str:
    error_type: Any = for_code(code)
    return f"{error_type.__name__} (code {code})"


def _is_retriable(code: int) -> bool:
    error_type: Any = for_code(code)
    return bool(getattr(error_type, "retriable", False))


def _security(security: KafkaSecurity | None) -> KafkaSecurity:
    """The given settings, or the environment's (SLOTFLOW_KAFKA_SECURITY_PROTOCOL, ...)."""
    return KafkaSecurity() if security is None else security


async def _unavailable(bootstrap: str, security: KafkaSecurity, err: BaseException) -> SlotflowError:
    """KafkaUnavailable, unless the broker refused the credentials or an ACL (permanent)."""
    failure = await start_failure(bootstrap, security, err, "Kafka admin client")
    if isinstance(failure, KafkaAuthenticationFailed | KafkaAccessDenied):
        return failure
    return KafkaUnavailable(f"Kafka at {bootstrap} is not reachable: {err!r}")


async def _start_admin(bootstrap: str, request_timeout_ms: int, security: KafkaSecurity) -> Any:
    admin: Any = AIOKafkaAdminClient(
        bootstrap_servers=bootstrap,
        client_id="slotflow-admin",
        request_timeout_ms=request_timeout_ms,
        **security.client_options(),
    )
    try:
        await admin.start()
    except (TimeoutError, KafkaError, OSError) as err:
        await admin.close()
        raise await _unavailable(bootstrap, security, err) from err
    return admin


async def ensure_topics(
    bootstrap: str,
    topics: Iterable[TopicSpec],
    *,
    replication_factor: int | None = None,
    min_insync_replicas: int | None = None,
    attempts: int = 10,
    request_timeout_ms: int = 30_000,
    security: KafkaSecurity | None = None,
) -> list[str]:
    """Create every topic in `topics` that does not exist yet; return the names created.

    `replication_factor` None takes min(3, the brokers the cluster reports): 1 on a single broker,
    3 on a real cluster. `min_insync_replicas` None takes replication_factor - 1 when that is above
    1 (a 3-replica topic needs 2 in-sync copies for an acks=all write, so one broker may be down
    and no write ever rests on a single copy); it becomes the topic config `min.insync.replicas`
    unless the TopicSpec sets one itself.

    Topics that already exist are left as they are (partitions and configs are not compared). Errors the
    broker calls retriable (e.g. no active controller yet right after start) are retried `attempts`
    times, then raise `KafkaUnavailable`; any other refusal raises `TopicCreationFailed`.

    On return every topic it had to create is in the broker's metadata with a leader for each
    partition, so producers and `describe_cluster` see it at once.
    """
    if replication_factor is not None and replication_factor < 1:
        raise ValueError("replication_factor must be at least 1")
    if min_insync_replicas is not None and min_insync_replicas < 1:
        raise ValueError("min_insync_replicas must be at least 1")
    wanted: dict[str, TopicSpec] = {}
    for spec in topics:
        wanted.setdefault(spec.name, spec)
    if not wanted:
        return []

    security = _security(security)
    admin = await _start_admin(bootstrap, request_timeout_ms, security)
    created: list[str] = []
    try:
        if replication_factor is None:
            brokers = _seq(_mapping(await admin.describe_cluster(), "Metadata").get("brokers"), "brokers")
            replication_factor = min(MAX_DEFAULT_REPLICATION, max(len(brokers), 1))
        min_isr = min_insync_replicas
        if min_isr is None and replication_factor > 1:
            min_isr = replication_factor - 1
        if min_isr is not None and min_isr > replication_factor:
            raise ValueError(
                f"min_insync_replicas={min_isr} exceeds replication_factor={replication_factor}: "
                "no acks=all write could ever succeed"
            )
        isr_config = {} if min_isr is None else {"min.insync.replicas": str(min_isr)}
        existing = {str(name) for name in _seq(await admin.list_topics(), "list_topics")}
        pending = [name for name in wanted if name not in existing]
        to_wait_for = list(pending)
        last_retriable: dict[str, str] = {}
        for attempt in range(max(attempts, 1)):
            if not pending:
                break
            if attempt:
                await asyncio.sleep(min(0.2 * 2**attempt, 3.0))
            new_topics = [
                NewTopic(
                    name=name,
                    num_partitions=wanted[name].partitions,
                    replication_factor=replication_factor,
                    topic_configs={**isr_config, **wanted[name].config()},
                )
                for name in pending
            ]
            try:
                response: Any = await admin.create_topics(new_topics, timeout_ms=request_timeout_ms)
            except (TimeoutError, KafkaError, OSError) as err:
                last_retriable = dict.fromkeys(pending, repr(err))
                continue
            failures: dict[str, str] = {}
            last_retriable = {}
            answered: set[str] = set()
            for entry in _seq(response.topic_errors, "CreateTopics topic_errors"):
                fields = _seq(entry, "CreateTopics topic error")
                if len(fields) < 2:
                    raise UnexpectedKafkaResponse(f"CreateTopics topic error: too short: {fields!r}")
                name = str(fields[0])
                code = _int(fields[1], f"CreateTopics error code for {name}")
                message = _str_or_none(fields[2], "CreateTopics error message") if len(fields) > 2 else None
                answered.add(name)
                if code == 0:
                    created.append(name)
                elif code == TOPIC_ALREADY_EXISTS:
                    pass
                elif _is_retriable(code):
                    last_retriable[name] = f"{_error_name(code)}: {message or ''}".rstrip(": ")
                else:
                    failures[name] = f"{_error_name(code)}: {message or ''}".rstrip(": ")
            if failures:
                raise TopicCreationFailed(failures)
            missing = [name for name in pending if name not in answered]
            if missing:
                raise UnexpectedKafkaResponse(f"CreateTopics response lacks topics {missing}")
            pending = list(last_retriable)
        if pending:
            detail = "; ".join(f"{name}: {why}" for name, why in sorted(last_retriable.items()))
            raise KafkaUnavailable(f"topics still not created after {attempts} attempts: {detail}")
    finally:
        await admin.close()
    await _wait_until_led(bootstrap, to_wait_for, request_timeout_ms / 1000, security)
    return created


async def _wait_until_led(
    bootstrap: str, names: list[str], timeout_s: float, security: KafkaSecurity
) -> None:
    """Poll metadata until every topic in `names` exists and each of its partitions has a leader."""
    if not names:
        return
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    client: Any = AIOKafkaClient(
        bootstrap_servers=bootstrap, client_id="slotflow-admin", **security.client_options()
    )
    waiting = set(names)
    try:
        await client.bootstrap()
        while True:
            node_id: Any = client.get_random_node()
            if node_id is not None:
                # allow_auto_topic_creation=False: asking must never create a topic by itself.
                meta = await client.send(node_id, MetadataRequest(sorted(waiting), False))
                obj = _mapping(meta.to_object(), "Metadata response")
                for raw_topic in _seq(obj.get("topics"), "Metadata topics"):
                    topic = _mapping(raw_topic, "Metadata topic")
                    partitions = _seq(topic.get("partitions"), "Metadata partitions")
                    led = all(_int(_mapping(p, "partition").get("leader"), "leader") >= 0 for p in partitions)
                    if topic.get("error_code") == 0 and partitions and led:
                        waiting.discard(str(topic.get("topic")))
            if not waiting:
                return
            if loop.time() >= deadline:
                raise KafkaUnavailable(
                    f"created topics have no leader after {timeout_s:.0f} s: {sorted(waiting)}"
                )
            await asyncio.sleep(0.05)
    except (TimeoutError, KafkaError, OSError) as err:
        raise KafkaUnavailable(f"Kafka at {bootstrap} is not reachable: {err!r}") from err
    finally:
        await client.close()


def _parse_metadata(meta: Any) -> tuple[str | None, int | None, tuple[int, ...], dict[str, int]]:
    obj = _mapping(meta.to_object(), "Metadata response")
    cluster_id = _str_or_none(obj.get("cluster_id"), "Metadata cluster_id")
    raw_controller = obj.get("controller_id")
    controller_id = None if raw_controller is None else _int(raw_controller, "Metadata controller_id")
    if controller_id is not None and controller_id < 0:
        controller_id = None
    brokers = sorted(
        _int(_mapping(b, "Metadata broker").get("node_id"), "Metadata broker node_id")
        for b in _seq(obj.get("brokers"), "Metadata brokers")
    )
    topic_partitions: dict[str, int] = {}
    for raw_topic in _seq(obj.get("topics"), "Metadata topics"):
        topic = _mapping(raw_topic, "Metadata topic")
        if topic.get("is_internal"):
            continue
        name = _str_or_none(topic.get("topic"), "Metadata topic name")
        if name is None:
            continue
        topic_partitions[name] = len(_seq(topic.get("partitions"), f"Metadata partitions of {name}"))
    return cluster_id, controller_id, tuple(brokers), dict(sorted(topic_partitions.items()))


def _parse_api_versions(response: Any) -> tuple[ApiVersionRange, ...]:
    code = _int(response.error_code, "ApiVersions error_code")
    if code != 0:
        raise UnexpectedKafkaResponse(f"ApiVersions failed: {_error_name(code)}")
    ranges = []
    for entry in _seq(response.api_versions, "ApiVersions api_versions"):
        fields = _seq(entry, "ApiVersions entry")
        if len(fields) < 3:
            raise UnexpectedKafkaResponse(f"ApiVersions entry too short: {fields!r}")
        ranges.append(
            ApiVersionRange(
                api_key=_int(fields[0], "ApiVersions api_key"),
                min_version=_int(fields[1], "ApiVersions min_version"),
                max_version=_int(fields[2], "ApiVersions max_version"),
            )
        )
    return tuple(sorted(ranges, key=lambda r: r.api_key))


async def describe_cluster(
    bootstrap: str, *, request_timeout_ms: int = 10_000, security: KafkaSecurity | None = None
) -> ClusterInfo:
    """Ask one broker for cluster metadata (all topics) and for the API versions it supports.

    Raises `KafkaUnavailable` when no broker answers; this makes it a protocol-level readiness probe.
    """
    security = _security(security)
    client: Any = AIOKafkaClient(
        bootstrap_servers=bootstrap,
        client_id="slotflow-admin",
        request_timeout_ms=request_timeout_ms,
        **security.client_options(),
    )
    try:
        await client.bootstrap()
        node_id: Any = client.get_random_node()
        if node_id is None:
            raise KafkaUnavailable(f"Kafka at {bootstrap} reports no brokers yet")
        meta = await client.send(node_id, MetadataRequest(None))
        versions = await client.send(node_id, ApiVersionRequest())
    except (TimeoutError, KafkaError, OSError) as err:
        raise await _unavailable(bootstrap, security, err) from err
    finally:
        await client.close()
    cluster_id, controller_id, broker_ids, topic_partitions = _parse_metadata(meta)
    return ClusterInfo(
        cluster_id=cluster_id,
        controller_id=controller_id,
        broker_ids=broker_ids,
        api_versions=_parse_api_versions(versions),
        topic_partitions=MappingProxyType(topic_partitions),
    )


async def warm_coordinators(
    bootstrap: str,
    *,
    timeout_s: float = 30.0,
    request_timeout_ms: int = 10_000,
    security: KafkaSecurity | None = None,
) -> None:
    """Make the broker create __consumer_offsets and __transaction_state now, not on first use.

    A FindCoordinator request (group, then transaction) makes the broker create the internal topic
    behind it; it answers COORDINATOR_NOT_AVAILABLE until that topic has a leader. Doing this once at
    start-up spares the first consumer group and the first transactional producer those retries.
    Raises `KafkaUnavailable` if the coordinators are not available within `timeout_s`.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    admin = await _start_admin(bootstrap, request_timeout_ms, _security(security))
    try:
        for coordinator_type, key in ((0, "slotflow-warm-up"), (1, "slotflow-warm-up")):
            while True:
                try:
                    await admin.find_coordinator(key, coordinator_type)
                    break
                except (TimeoutError, KafkaError, OSError) as err:
                    if loop.time() >= deadline:
                        kind = "group" if coordinator_type == 0 else "transaction"
                        raise KafkaUnavailable(
                            f"no {kind} coordinator within {timeout_s} s: {err!r}"
                        ) from err
                    await asyncio.sleep(0.2)
    finally:
        await admin.close()


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m slotflow.kafka.admin ensure-topics|describe`: for deployments without the devstack."""
    import argparse
    import json

    from slotflow.settings import KafkaSettings

    parser = argparse.ArgumentParser(prog="python -m slotflow.kafka.admin")
    parser.add_argument("command", choices=["ensure-topics", "describe"])
    parser.add_argument(
        "--replication-factor",
        type=int,
        default=None,
        help="replicas per partition (default SLOTFLOW_KAFKA_REPLICATION_FACTOR, else min(3, brokers))",
    )
    parser.add_argument(
        "--min-insync-replicas",
        type=int,
        default=None,
        help="topic config min.insync.replicas (default SLOTFLOW_KAFKA_MIN_INSYNC_REPLICAS, else "
        "replication factor - 1 when above 1)",
    )
    args = parser.parse_args(argv)
    settings = KafkaSettings()
    for flag, value in (
        ("--replication-factor", args.replication_factor),
        ("--min-insync-replicas", args.min_insync_replicas),
    ):
        if value is not None and value < 1:
            parser.error(f"{flag} must be at least 1")
    try:
        if args.command == "ensure-topics":
            created = asyncio.run(
                ensure_topics(
                    settings.bootstrap,
                    settings.topics(),
                    replication_factor=args.replication_factor or settings.replication_factor,
                    min_insync_replicas=args.min_insync_replicas or settings.min_insync_replicas,
                    security=settings.security,
                )
            )
            print(f"created {len(created)} topics: {', '.join(created) or '-'}")  # noqa: T201
        else:
            info = asyncio.run(describe_cluster(settings.bootstrap, security=settings.security))
            summary = {
                "cluster_id": info.cluster_id,
                "brokers": list(info.broker_ids),
                "topics": dict(info.topic_partitions),
            }
            print(json.dumps(summary, indent=2))  # noqa: T201
    except (SlotflowError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)  # noqa: T201
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
