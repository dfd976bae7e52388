"""SLOTFLOW_KAFKA_BROKERS=3: three KRaft nodes with their own ports and files, replication 3 and
min ISR 2 everywhere; the one-broker default unchanged; bad values refused clearly."""

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

DEVSTACK = Path(__file__).resolve().parents[3] / "deploy" / "devstack"


@pytest.fixture(scope="module")
def devstack() -> Iterator[tuple[ModuleType, ModuleType]]:
    sys.path.insert(0, str(DEVSTACK))
    try:
        yield importlib.import_module("_config"), importlib.import_module("_kafka_cluster")
    finally:
        sys.path.remove(str(DEVSTACK))


def properties(text: str) -> dict[str, str]:
    lines = [line for line in text.splitlines() if "=" in line and not line.startswith("#")]
    return {line.split("=", 1)[0]: line.split("=", 1)[1] for line in lines}


@pytest.fixture
def three(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("SLOTFLOW_KAFKA_EXTRA_LISTENERS", raising=False)
    monkeypatch.setenv("SLOTFLOW_KAFKA_BROKERS", "3")
    monkeypatch.setenv("SLOTFLOW_KAFKA_PORT", "25092")
    monkeypatch.setenv("SLOTFLOW_KAFKA_CONTROLLER_PORT", "25093")
    monkeypatch.setenv("SLOTFLOW_PG_PORT", "25432")
    monkeypatch.setenv("SLOTFLOW_DEVSTACK_DIR", str(tmp_path))


@pytest.mark.usefixtures("three")
def test_three_nodes_have_their_own_ports_files_and_the_bootstrap_lists_all(
    devstack: tuple[ModuleType, ModuleType],
) -> None:
    config, _ = devstack
    cfg = config.Config.from_env()
    nodes = cfg.kafka_nodes
    assert [(n.node_id, n.port, n.controller_port) for n in nodes] == [
        (1, 25092, 25093),
        (2, 25094, 25095),
        (3, 25096, 25097),
    ]
    assert cfg.bootstrap == "127.0.0.1:25092,127.0.0.1:25094,127.0.0.1:25096"
    assert len({n.data for n in nodes} | {n.pid_file for n in nodes} | {n.log for n in nodes}) == 9
    assert cfg.kafka_data not in {n.data for n in nodes}


@pytest.mark.usefixtures("three")
def test_each_node_is_a_voter_with_replication_three_and_min_isr_two(
    devstack: tuple[ModuleType, ModuleType],
) -> None:
    config, cluster = devstack
    cfg = config.Config.from_env()
    node = cfg.kafka_nodes[1]
    props = properties(cluster.node_properties(cfg, node))
    assert props["node.id"] == "2"
    assert props["process.roles"] == "broker,controller"
    assert props["controller.quorum.voters"] == "1@127.0.0.1:25093,2@127.0.0.1:25095,3@127.0.0.1:25097"
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:25094,CONTROLLER://127.0.0.1:25095"
    assert props["log.dirs"] == str(node.data)
    for key in (
        "default.replication.factor",
        "offsets.topic.replication.factor",
        "transaction.state.log.replication.factor",
    ):
        assert props[key] == "3", key
    for key in ("min.insync.replicas", "transaction.state.log.min.isr"):
        assert props[key] == "2", key
    assert props["unclean.leader.election.enable"] == "false"


def test_one_broker_is_the_default_and_keeps_its_bootstrap(
    devstack: tuple[ModuleType, ModuleType], monkeypatch: pytest.MonkeyPatch
) -> None:
    config, _ = devstack
    monkeypatch.delenv("SLOTFLOW_KAFKA_BROKERS", raising=False)
    monkeypatch.delenv("SLOTFLOW_KAFKA_EXTRA_LISTENERS", raising=False)
    monkeypatch.setenv("SLOTFLOW_KAFKA_PORT", "25092")
    cfg = config.Config.from_env()
    assert cfg.brokers == 1
    assert cfg.kafka_nodes == ()
    assert cfg.bootstrap == "127.0.0.1:25092"


@pytest.mark.parametrize("value", ["2", "three", "0"])
def test_a_broker_count_other_than_1_or_3_is_refused(
    devstack: tuple[ModuleType, ModuleType], monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    config, _ = devstack
    monkeypatch.setenv("SLOTFLOW_KAFKA_BROKERS", value)
    with pytest.raises(config.DevstackError, match="expected 1 or 3"):
        config.Config.from_env()


@pytest.mark.usefixtures("three")
def test_extra_listeners_and_clashing_node_ports_are_refused(
    devstack: tuple[ModuleType, ModuleType], monkeypatch: pytest.MonkeyPatch
) -> None:
    config, cluster = devstack
    monkeypatch.setenv("SLOTFLOW_KAFKA_EXTRA_LISTENERS", "SVC_A:26000:26001")
    with pytest.raises(config.DevstackError, match="one broker only"):
        config.Config.from_env()
    monkeypatch.delenv("SLOTFLOW_KAFKA_EXTRA_LISTENERS")
    # Controller at the broker port + 2 collides with node 2's broker port.
    monkeypatch.setenv("SLOTFLOW_KAFKA_CONTROLLER_PORT", "25094")
    with pytest.raises(config.DevstackError, match="must differ"):
        config.Config.from_env()
    monkeypatch.setenv("SLOTFLOW_KAFKA_CONTROLLER_PORT", "25093")
    with pytest.raises(config.DevstackError, match="no Kafka node 4"):
        cluster.node_by_id(config.Config.from_env(), 4)
