"""The replicated group records: what survives a coordinator failover, byte for byte."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from multiraft.consumer_groups import (
    GroupMetadataRecord,
    GroupRecordDecodeError,
    GroupRecordEncodeError,
    GroupState,
    GroupTombstone,
    MemberRecord,
    Subscription,
    decode_group_record,
    encode_group_record,
    is_group_record,
)
from multiraft.node.replicas.offsets import encode_commit
from multiraft.node.vocabulary.offsets import CommittedOffset

names = st.text(min_size=0, max_size=12)
partitions = st.frozensets(st.tuples(names, st.integers(0, 2**31 - 1)), max_size=5)
ints = st.integers(-(2**63), 2**63 - 1)

members = st.builds(
    MemberRecord,
    names,
    st.none() | names,
    names,
    names,
    ints,
    ints,
    st.lists(names, max_size=3).map(tuple),
    st.builds(
        Subscription,
        st.lists(names, max_size=3).map(tuple),
        partitions,
        ints,
        st.none() | names,
        st.binary(max_size=16),
    ),
    partitions,
    partitions,
    partitions,
)
records = st.builds(
    GroupMetadataRecord,
    names,
    ints,
    st.sampled_from([GroupState.EMPTY, GroupState.STABLE]),
    st.none() | names,
    st.none() | names,
    names,
    st.lists(members, max_size=4).map(tuple),
    ints,
) | st.builds(GroupTombstone, names)


@given(records)
def test_every_record_decodes_to_what_was_encoded(record) -> None:
    encoded = encode_group_record(record)
    assert decode_group_record(encoded) == record
    assert encode_group_record(decode_group_record(encoded)) == encoded  # equal records, equal bytes
    assert is_group_record(encoded)


def test_offset_commits_in_the_same_partition_are_told_apart() -> None:
    commit = encode_commit("g", [CommittedOffset("t", 0, 5)])
    assert not is_group_record(commit)
    with pytest.raises(GroupRecordDecodeError):
        decode_group_record(commit)


@given(st.binary(max_size=64))
def test_garbage_raises_the_decode_error_and_nothing_else(data: bytes) -> None:
    try:
        decode_group_record(data)
    except GroupRecordDecodeError:
        pass


def test_a_malformed_field_is_named() -> None:
    document = json.loads(encode_group_record(GroupMetadataRecord("g", 1, GroupState.EMPTY, None, None, "", (), 0)))
    document["generation"] = "1"
    with pytest.raises(GroupRecordDecodeError, match="generation"):
        decode_group_record(json.dumps(document).encode())
    document["generation"], document["t"] = 1, "mystery"
    with pytest.raises(GroupRecordDecodeError, match="mystery"):
        decode_group_record(json.dumps(document).encode())


def test_a_value_beyond_the_format_is_refused_at_the_proposer() -> None:
    with pytest.raises(GroupRecordEncodeError):
        encode_group_record(GroupMetadataRecord("g", 1, GroupState.EMPTY, None, None, "", (), float("nan")))  # type: ignore[arg-type]
