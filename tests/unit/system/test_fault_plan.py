"""The system suite's 3-broker mode adds broker kills from a stream of their own: every other fault
of a seed stays where it was, and the Kafka network faults (per-service forwarders) are left out."""

import pytest

from tests.chaos.system.harness import KAFKA_NETWORK_FAULTS, PROFILES, fault_plan

SERVICES = ["ticker-0", "claimer-0", "claimer-1", "orchestrator-0", "dlq"]


@pytest.mark.parametrize("seed", [1, 2, 3, 7])
def test_three_brokers_add_broker_kills_and_move_nothing_else(seed: int) -> None:
    profile = PROFILES["short"]
    one = fault_plan(seed, profile, SERVICES)
    three = fault_plan(seed, profile, SERVICES, brokers=3)
    kills = [f for f in three if f.kind == "broker_kill"]
    assert kills
    assert all(f.target in {"1", "2", "3"} for f in kills)
    assert not any(f.kind == "broker_kill" for f in one)
    rest_of_one = [f for f in one if f.kind not in KAFKA_NETWORK_FAULTS]
    rest_of_three = [f for f in three if f.kind != "broker_kill"]
    assert rest_of_three == rest_of_one
    assert fault_plan(seed, profile, SERVICES, brokers=3) == three
