"""The relay's batched produce places records exactly where aiokafka's partitioner would (its
murmur2, a faster copy of aiokafka's, included)."""

from aiokafka.partitioner import DefaultPartitioner
from aiokafka.partitioner import murmur2 as aiokafka_murmur2
from hypothesis import given
from hypothesis import strategies as st

from slotflow.kafka.producer import murmur2, partition_for


@given(key=st.binary(max_size=64), count=st.integers(min_value=1, max_value=200))
def test_same_partition_as_the_default_partitioner(key: bytes, count: int) -> None:
    partitions = list(set(range(count)))  # how the producer's metadata lists them
    assert partition_for(key, partitions, partitions) == DefaultPartitioner()(key, partitions, partitions)


def test_a_record_without_key_goes_to_an_available_partition() -> None:
    assert all(partition_for(None, [0, 1, 2, 3], [2]) == 2 for _ in range(20))
    assert {partition_for(None, [0, 1], []) for _ in range(200)} == {0, 1}


@given(key=st.binary(max_size=200))
def test_murmur2_is_aiokafkas(key: bytes) -> None:
    assert murmur2(key) == aiokafka_murmur2(key)
