"""The offsets commit format and the group -> partition mapping clients and nodes agree on."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from multiraft.node.replicas.offsets import decode_commit, encode_commit, group_partition
from multiraft.node.vocabulary.offsets import CommittedOffset

GOLDEN = {"billing": 8, "reader": 0, "g": 8, "analytics": 14, "etl-1": 3}


def test_a_group_maps_to_crc32c_of_its_name_modulo_the_partitions() -> None:
    # Golden values: changing the mapping would lose every group's committed offsets on upgrade.
    assert {g: group_partition(g, 16) for g in GOLDEN} == GOLDEN


@given(group=st.text(min_size=1, max_size=50), partitions=st.integers(1, 1000))
def test_group_partition_is_stable_and_in_range(group: str, partitions: int) -> None:
    assert 0 <= group_partition(group, partitions) < partitions
    assert group_partition(group, partitions) == group_partition(group, partitions)


@given(
    group=st.text(min_size=1, max_size=20),
    rows=st.lists(st.tuples(st.text(max_size=10), st.integers(0, 99), st.integers(0, 2**62), st.text(max_size=10))),
)
def test_a_commit_round_trips(group: str, rows: list[tuple[str, int, int, str]]) -> None:
    offsets = [CommittedOffset(t, p, o, m) for t, p, o, m in rows]
    assert decode_commit(encode_commit(group, offsets)) == (group, rows)


@pytest.mark.parametrize(
    "payload", [b"", b"{}", b'{"v":"offsets/1"}', b"\xff\xfe", b'{"v":"offsets/1","group":1,"offsets":5}']
)
def test_a_payload_that_is_not_a_commit_is_refused(payload: bytes) -> None:
    with pytest.raises(ValueError):
        decode_commit(payload)
