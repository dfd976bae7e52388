"""Choosing the test session's stack (tests/stack.py): the selection logic. The container path
itself runs with `make test-containers` (docs/devstack.md), where podman or Docker runs."""

import pytest

from tests.stack import DOCKER_SOCKET, StackUnavailable, choose, docker_engine_available, session_stack


def test_the_devstack_is_the_default() -> None:
    assert choose({}, docker=False) == "devstack"
    assert choose({"SLOTFLOW_TEST_STACK": ""}, docker=True) == "devstack"
    assert choose({"SLOTFLOW_TEST_STACK": " DevStack "}, docker=False) == "devstack"


IMAGES = {"SLOTFLOW_TEST_KAFKA_IMAGE": "localhost/k:1", "SLOTFLOW_TEST_POSTGRES_IMAGE": "localhost/p:1"}


def test_testcontainers_only_with_a_docker_engine() -> None:
    assert choose({"SLOTFLOW_TEST_STACK": "testcontainers", **IMAGES}, docker=True) == "testcontainers"
    with pytest.raises(StackUnavailable, match="needs a Docker engine"):
        choose({"SLOTFLOW_TEST_STACK": "testcontainers", **IMAGES}, docker=False)


def test_testcontainers_needs_both_images_named() -> None:
    only_kafka = {"SLOTFLOW_TEST_STACK": "testcontainers", "SLOTFLOW_TEST_KAFKA_IMAGE": "localhost/k:1"}
    with pytest.raises(
        StackUnavailable, match=r"needs SLOTFLOW_TEST_POSTGRES_IMAGE: deploy/containers/build-images\.sh"
    ):
        choose(only_kafka, docker=True)


def test_external_needs_both_variables() -> None:
    both = {
        "SLOTFLOW_TEST_STACK": "external",
        "SLOTFLOW_KAFKA_BOOTSTRAP": "k:9092",
        "SLOTFLOW_PG_DSN": "postgresql://x",
    }
    assert choose(both, docker=False) == "external"
    with pytest.raises(StackUnavailable, match="SLOTFLOW_PG_DSN"):
        choose({"SLOTFLOW_TEST_STACK": "external", "SLOTFLOW_KAFKA_BOOTSTRAP": "k:9092"}, docker=False)


def test_an_unknown_stack_is_refused() -> None:
    with pytest.raises(StackUnavailable, match="choose one of devstack, testcontainers, external"):
        choose({"SLOTFLOW_TEST_STACK": "docker"}, docker=True)


def test_docker_engine_detection() -> None:
    assert docker_engine_available({"DOCKER_HOST": "unix:///run/podman/podman.sock"}, exists=lambda _: False)
    assert docker_engine_available({}, exists=lambda path: path == DOCKER_SOCKET)
    assert not docker_engine_available({}, exists=lambda _: False)


def test_the_devstack_and_external_stacks_start_nothing() -> None:
    with session_stack({}) as endpoints:
        assert (endpoints.stack, endpoints.kafka_bootstrap, endpoints.pg_dsn) == ("devstack", None, None)
    external = {
        "SLOTFLOW_TEST_STACK": "external",
        "SLOTFLOW_KAFKA_BOOTSTRAP": "k:1",
        "SLOTFLOW_PG_DSN": "postgresql://x",
    }
    with session_stack(external) as endpoints:
        assert (endpoints.stack, endpoints.kafka_bootstrap, endpoints.pg_dsn) == ("external", None, None)


def test_asking_for_containers_without_an_engine_fails_before_anything_starts() -> None:
    with (
        pytest.raises(StackUnavailable),
        session_stack({"SLOTFLOW_TEST_STACK": "testcontainers", "DOCKER_HOST": ""}),
    ):
        pass
