"""The topic table says who reads each topic, and the Kafka ACLs are derived from it
(`slotflow.kafka.acls.service_acls`): every topic the api's projector reads must name the api, or
on a broker with ACLs the api cannot read it (found on the SASL_SSL broker: the command topics,
whose records tell the read model which commands exist, did not name it)."""

from slotflow.kafka.acls import Operation, ResourceType, service_acls
from slotflow.settings import KafkaSettings
from slotflow_api.projector import PROJECTED_TOPICS


def test_every_projected_topic_names_the_api_as_a_consumer() -> None:
    missing = [spec.name for spec in PROJECTED_TOPICS if "api" not in spec.consumers]
    assert missing == []


def test_the_api_may_read_every_topic_its_projector_reads() -> None:
    kafka = KafkaSettings(bootstrap="127.0.0.1:9", topic_namespace="ns")
    readable = {
        acl.resource_name
        for acl in service_acls("api", "User:api", kafka)
        if acl.resource_type == ResourceType.TOPIC and acl.operation == Operation.READ
    }
    assert {kafka.topic(spec) for spec in PROJECTED_TOPICS} <= readable
