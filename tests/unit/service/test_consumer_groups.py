"""Every service names its consumer groups through `KafkaConnection.consumer_group`: inside the
deployment's namespace, so two deployments sharing a cluster never join each other's groups."""

from slotflow.settings import KafkaSettings
from slotflow_api.config import ApiSettings
from slotflow_api.config import Settings as ApiServiceSettings
from slotflow_claimer.config import Settings as ClaimerServiceSettings
from slotflow_orchestrator.config import Settings as OrchestratorServiceSettings
from slotflow_ticker.command_loop import group_id as ticker_group
from slotflow_ticker.config import TickerSettings


def test_a_group_is_namespaced_like_a_topic() -> None:
    assert KafkaSettings(topic_namespace="blue").consumer_group("slotflow.ticker") == "blue.slotflow.ticker"
    assert KafkaSettings(topic_namespace="").consumer_group("slotflow.ticker") == "slotflow.ticker"


def test_every_service_names_its_groups_in_the_namespace() -> None:
    kafka = KafkaSettings(topic_namespace="blue")
    assert ticker_group(TickerSettings(), kafka) == "blue.slotflow.ticker"
    claimer = ClaimerServiceSettings(kafka=kafka)
    assert claimer.group_id() == "blue.slotflow-claimer"
    assert claimer.redrives_group_id() == "blue.slotflow-claimer-redrives"
    assert OrchestratorServiceSettings(kafka=kafka).group_id() == "blue.slotflow-orchestrator"
    api = ApiServiceSettings(api=ApiSettings(), kafka=kafka)
    assert api.group_id("g1") == "blue.slotflow-api-projector.g1"


def test_the_stats_worker_names_its_app_in_the_namespace() -> None:
    from slotflow_base.settings import KafkaConnection
    from slotflow_stats.config import Settings as StatsServiceSettings

    stats = StatsServiceSettings(kafka=KafkaConnection(topic_namespace="blue"))
    assert stats.app_id == f"blue.{stats.stats.app_name}"


def test_the_stats_worker_reads_kafka_and_postgres_through_the_one_definition() -> None:
    # A copy of these settings in the worker once left its secrets out of the log masking.
    from slotflow_base.settings import KafkaConnection, PostgresSettings
    from slotflow_stats.config import Settings as StatsServiceSettings

    assert StatsServiceSettings.model_fields["kafka"].annotation is KafkaConnection
    assert StatsServiceSettings.model_fields["postgres"].annotation is PostgresSettings
