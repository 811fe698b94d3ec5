"""The key partitioner is part of the public contract: crc32c(key bytes) % partitions, stable forever."""

from __future__ import annotations

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rpc.client._partitioner import partition_for_key


def test_the_partitioner_is_crc32c_castagnoli_of_the_key_modulo_the_partition_count() -> None:
    # The standard CRC-32C check value: CRC-32C("123456789") = 0xE3069283.
    assert partition_for_key(b"123456789", 2**32 - 1) == 0xE3069283 % (2**32 - 1)
    assert partition_for_key(b"123456789", 7) == 0xE3069283 % 7
    # Golden placements that other clients must reproduce.
    assert [partition_for_key(b"user-%d" % i, 6) for i in range(8)] == [
        crc32c.crc32c(b"user-%d" % i) % 6 for i in range(8)
    ]
    assert partition_for_key(b"", 6) == 0


@given(key=st.binary(max_size=256), partitions=st.integers(min_value=1, max_value=10_000))
def test_every_key_maps_to_a_partition_in_range_and_always_the_same_one(key: bytes, partitions: int) -> None:
    first = partition_for_key(key, partitions)
    assert 0 <= first < partitions
    assert partition_for_key(bytes(key), partitions) == first
    assert first == crc32c.crc32c(key) % partitions


@settings(max_examples=25)
@given(keys=st.lists(st.binary(min_size=1, max_size=16), min_size=200, max_size=200, unique=True))
def test_distinct_keys_spread_over_the_partitions(keys: list[bytes]) -> None:
    used = {partition_for_key(key, 4) for key in keys}
    assert used == {0, 1, 2, 3}


def test_a_topic_has_at_least_one_partition() -> None:
    with pytest.raises(ValueError, match="at least one partition"):
        partition_for_key(b"k", 0)
