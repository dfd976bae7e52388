"""KafkaSecurity: what each combination of settings gives aiokafka, and what it refuses."""

import ssl
from pathlib import Path

import pytest
from pydantic import ValidationError

from slotflow.errors import ConfigurationError
from slotflow.kafka.acls import (
    SERVICE_GROUPS,
    AclBinding,
    Operation,
    PatternType,
    ResourceType,
    service_acls,
)
from slotflow.kafka.security import KafkaSecurity, load_token_function
from slotflow.settings import KafkaSettings


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """A shell with a secured devstack's exports must not change what these tests see."""
    for name in KafkaSecurity().env():
        monkeypatch.delenv(name, raising=False)
    for name in ("SASL_MECHANISM", "SASL_USERNAME", "SASL_PASSWORD", "SSL_CAFILE"):
        monkeypatch.delenv(f"SLOTFLOW_KAFKA_{name}", raising=False)


def test_plaintext_is_the_default_and_passes_only_the_protocol() -> None:
    assert KafkaSecurity().client_options() == {"security_protocol": "PLAINTEXT"}


def test_the_environment_configures_scram_over_tls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLOTFLOW_KAFKA_SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("SLOTFLOW_KAFKA_SASL_MECHANISM", "SCRAM-SHA-256")
    monkeypatch.setenv("SLOTFLOW_KAFKA_SASL_USERNAME", "claimer")
    monkeypatch.setenv("SLOTFLOW_KAFKA_SASL_PASSWORD", "s3cret")
    settings = KafkaSettings()
    options = settings.client_options()
    assert options["security_protocol"] == "SASL_SSL"
    assert options["sasl_mechanism"] == "SCRAM-SHA-256"
    assert (options["sasl_plain_username"], options["sasl_plain_password"]) == ("claimer", "s3cret")
    assert isinstance(options["ssl_context"], ssl.SSLContext)
    assert options["ssl_context"].check_hostname
    assert "s3cret" not in repr(settings)
    assert settings.security.principal == "User:claimer (SCRAM-SHA-256)"


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"security_protocol": "SASL_SSL"}, "needs SLOTFLOW_KAFKA_SASL_MECHANISM"),
        ({"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN"}, "SASL_USERNAME"),
        ({"sasl_mechanism": "PLAIN"}, "does not use SASL"),
        ({"ssl_cafile": "ca.pem"}, "does not use TLS"),
        ({"security_protocol": "SSL", "ssl_keyfile": "k.pem"}, "SSL_KEYFILE needs"),
        ({"security_protocol": "SASL_SSL", "sasl_mechanism": "OAUTHBEARER"}, "exactly one of"),
    ],
)
def test_inconsistent_settings_are_refused_with_the_variable_to_fix(
    values: dict[str, str], message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        KafkaSecurity(**values)  # type: ignore[arg-type]


def test_a_missing_ca_file_is_a_configuration_error_naming_it(tmp_path: Path) -> None:
    security = KafkaSecurity(security_protocol="SSL", ssl_cafile=tmp_path / "absent.pem")
    with pytest.raises(ConfigurationError, match=r"absent\.pem"):
        security.client_options()


async def test_oauthbearer_takes_a_static_token_or_a_callable() -> None:
    static = KafkaSecurity(security_protocol="SASL_SSL", sasl_mechanism="OAUTHBEARER", sasl_oauth_token="t0k")  # type: ignore[arg-type]
    assert await static.client_options()["sasl_oauth_token_provider"].token() == "t0k"
    provided = KafkaSecurity(
        security_protocol="SASL_SSL",
        sasl_mechanism="OAUTHBEARER",
        sasl_oauth_token_provider="tests.unit.kafka.test_security:_token",
    )
    assert await provided.client_options()["sasl_oauth_token_provider"].token() == "from-a-callable"


async def _token() -> str:
    return "from-a-callable"


@pytest.mark.parametrize("path", ["no_colon", "tests.unit.kafka.test_security:absent", "no.such.module:f"])
def test_a_bad_token_provider_path_is_a_configuration_error(path: str) -> None:
    with pytest.raises(ConfigurationError, match="SLOTFLOW_KAFKA_SASL_OAUTH_TOKEN_PROVIDER"):
        load_token_function(path)


def test_the_env_round_trips_through_the_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    security = KafkaSecurity(
        security_protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_username="ticker",
        sasl_password="pw",  # type: ignore[arg-type]
        ssl_cafile=Path("ca.pem"),
        ssl_check_hostname=False,
    )
    for name, value in security.env().items():
        monkeypatch.setenv(name, value)
    assert KafkaSecurity() == security


def test_the_claimer_reads_and_writes_only_its_own_topics_and_groups() -> None:
    kafka = KafkaSettings(topic_namespace="ns")
    acls = service_acls("claimer", "User:claimer", kafka)
    topics = {(a.resource_name, a.operation) for a in acls if a.resource_type is ResourceType.TOPIC}
    assert ("ns.slotflow.jobs.due.v1", Operation.READ) in topics
    assert ("ns.slotflow.runs.events.v1", Operation.WRITE) in topics
    assert ("ns.slotflow.dlq.messages.v1", Operation.WRITE) in topics
    assert ("ns.slotflow.jobs.due.v1", Operation.WRITE) not in topics
    assert ("ns.slotflow.workflows.history.v1", Operation.READ) not in topics
    groups = [a for a in acls if a.resource_type is ResourceType.GROUP]
    assert [(g.resource_name, g.pattern_type) for g in groups] == [
        ("ns.slotflow-claimer", PatternType.PREFIXED)
    ]
    with pytest.raises(ValueError, match="unknown service"):
        service_acls("billing", "User:billing", kafka)


def test_only_the_claimer_and_the_orchestrator_may_write_the_internal_timer_topic() -> None:
    """A StartTimer fires whatever it carries, so its topic is writable by its two issuers only,
    and they no longer write the public command topic (the ticker refuses timer commands there)."""
    kafka = KafkaSettings(topic_namespace="ns")
    timers, public = "ns.slotflow.timers.commands.v1", "ns.slotflow.schedules.commands.v1"

    def grants(service: str) -> set[tuple[str, Operation]]:
        acls = service_acls(service, f"User:{service}", kafka)
        return {(a.resource_name, a.operation) for a in acls if a.resource_type is ResourceType.TOPIC}

    writers = {s for s in SERVICE_GROUPS if (timers, Operation.WRITE) in grants(s)}
    readers = {s for s in SERVICE_GROUPS if (timers, Operation.READ) in grants(s)}
    assert writers == {"claimer", "orchestrator"}
    assert readers == {"ticker", "api"}
    assert {s for s in SERVICE_GROUPS if (public, Operation.WRITE) in grants(s)} == {"api", "cli"}
    assert (public, Operation.READ) in grants("ticker")


def test_the_dlq_writes_only_its_own_topics_and_only_it_writes_the_redrive_topic() -> None:
    """A redrive is a request to the record's owner (docs/decisions/0009): the dlq writes no other
    service's topic (jobs.due least of all), and only it writes the internal redrive topic, which
    the owners read in groups their ACLs already cover."""
    kafka = KafkaSettings(topic_namespace="ns")
    redrives = "ns.slotflow.dlq.redrives.v1"

    def grants(service: str) -> set[tuple[str, Operation]]:
        acls = service_acls(service, f"User:{service}", kafka)
        return {(a.resource_name, a.operation) for a in acls if a.resource_type is ResourceType.TOPIC}

    dlq_writes = {name for name, operation in grants("dlq") if operation is Operation.WRITE}
    assert dlq_writes == {"ns.slotflow.dlq.messages.v1", "ns.slotflow.dlq.events.v1", redrives}
    assert {s for s in SERVICE_GROUPS if (redrives, Operation.WRITE) in grants(s)} == {"dlq"}
    assert {s for s in SERVICE_GROUPS if (redrives, Operation.READ) in grants(s)} == {
        "ticker",
        "claimer",
        "orchestrator",
        "dlq",
    }


def test_only_the_orchestrator_writes_the_activity_cancel_topic_and_only_the_claimer_reads_it() -> None:
    """A CancelActivity stops a running handler: the internal topic takes the orchestrator's
    records alone, and the claimer reads it in a group its `slotflow-claimer` prefix covers."""
    kafka = KafkaSettings(topic_namespace="ns")
    cancels = "ns.slotflow.activities.cancels.v1"

    def acls(service: str) -> list[AclBinding]:
        return service_acls(service, f"User:{service}", kafka)

    def grants(service: str) -> set[tuple[str, Operation]]:
        return {
            (a.resource_name, a.operation) for a in acls(service) if a.resource_type is ResourceType.TOPIC
        }

    assert {s for s in SERVICE_GROUPS if (cancels, Operation.WRITE) in grants(s)} == {"orchestrator"}
    assert {s for s in SERVICE_GROUPS if (cancels, Operation.READ) in grants(s)} == {"claimer"}
    group = kafka.consumer_group("slotflow-claimer-activity-cancels")
    prefixes = [a.resource_name for a in acls("claimer") if a.resource_type is ResourceType.GROUP]
    assert any(group.startswith(prefix) for prefix in prefixes)
