"""Command and snapshot encodings: exact round trips, a stable format, and only CommandDecodeError on garbage."""

from __future__ import annotations

import json
import struct
import zlib
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from multiraft.controller import (
    AllocateProducerIds,
    ClusterState,
    CommandDecodeError,
    CommandEncodeError,
    CreateTopic,
    DeleteTopic,
    NodeState,
    RegisterNode,
    SetNodeState,
    SetPartitionReplicas,
    UnsupportedVersionError,
    apply,
    decode_command,
    decode_snapshot,
    encode_command,
    encode_snapshot,
)
from multiraft.controller.state import Command

from ._helpers import cluster, create_topic, node, run, step
from .strategies import LOGS, any_commands

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=12,
)


def sample_state() -> ClusterState:
    state = create_topic(cluster(4, racks=["a", "b"]), "orders", 3, 3, configs={"retention.ms": "-1"})
    state = run(
        state,
        SetPartitionReplicas("orders", 1, (2, 3, 4), (1,), 2),
        SetNodeState(4, NodeState.DRAINING),
        AllocateProducerIds(100),
    )
    return step(state, DeleteTopic("nope"))[0]  # a failed command still moves the applied index


# ---------------------------------------------------------------------------------------------- commands


@given(any_commands())
def test_every_command_round_trips_exactly(command: Command) -> None:
    data = encode_command(command)
    assert decode_command(data) == command
    assert encode_command(decode_command(data)) == data


def test_the_command_format_is_stable() -> None:
    command = CreateTopic("orders", {"retention.ms": "-1"}, (((1, 2), 1), ((2, 1), 2)), created_ms=5)
    assert encode_command(command) == (
        b'{"assignments":[[[1,2],1],[[2,1],2]],"configs":{"retention.ms":"-1"},"created_ms":5,'
        b'"internal":false,"name":"orders","t":"create_topic","v":1}'
    )
    assert encode_command(RegisterNode(node(3, rack="r1"))) == (
        b'{"node":{"capacity":1.0,"client":"10.0.0.3:9092","gossip":"10.0.0.3:9094","id":3,'
        b'"peer":"10.0.0.3:9093","rack":"r1","state":"active"},"t":"register_node","v":1}'
    )

    assert encode_command(RegisterNode(node(3, host="m1"))) == (
        b'{"node":{"capacity":1.0,"client":"10.0.0.3:9092","gossip":"10.0.0.3:9094","host":"m1","id":3,'
        b'"peer":"10.0.0.3:9093","rack":"","state":"active"},"t":"register_node","v":1}'
    )


def test_a_node_registered_before_hosts_existed_decodes_with_no_host() -> None:
    old = (
        b'{"node":{"capacity":1.0,"client":"10.0.0.3:9092","gossip":"10.0.0.3:9094","id":3,'
        b'"peer":"10.0.0.3:9093","rack":"r1","state":"active"},"t":"register_node","v":1}'
    )
    assert decode_command(old) == RegisterNode(node(3, rack="r1"))
    with pytest.raises(CommandDecodeError, match=r"node\.host is not a string"):
        decode_command(old.replace(b'"id":3', b'"host":7,"id":3'))
    with pytest.raises(CommandDecodeError, match="unexpected keys"):
        decode_command(old.replace(b'"id":3', b'"hosts":"m1","id":3'))


def test_a_snapshot_written_before_hosts_existed_loads_and_hosts_survive_a_snapshot() -> None:
    state = sample_state()
    body = json.loads(zlib.decompress(encode_snapshot(state)[9:]))
    assert all("host" not in n for n in body["nodes"])  # no hosts: the bytes of the first format
    assert decode_snapshot(_snapshot_of(body)) == state
    hosted = run(state, RegisterNode(node(5, host="m1")), RegisterNode(node(6, host="m1")))
    restored = decode_snapshot(encode_snapshot(hosted))
    assert restored == hosted and restored.nodes[6].host == "m1"


@pytest.mark.parametrize(
    "command",
    [
        RegisterNode(replace(node(1), capacity=float("nan"))),
        RegisterNode(replace(node(1), capacity=float("inf"))),
        AllocateProducerIds(2**63),
        CreateTopic("t", {"k": 5}, ()),  # type: ignore[dict-item]
        CreateTopic("t", {1: "v"}, ()),  # type: ignore[dict-item]
        SetPartitionReplicas("t", 0, (1, True), (), 1),  # a bool is not a node id
        SetNodeState(1, "gone"),  # type: ignore[arg-type]
        "not a command",
    ],
)
def test_values_the_format_cannot_hold_are_refused_when_encoding(command: Any) -> None:
    with pytest.raises(CommandEncodeError):
        encode_command(command)


@settings(max_examples=300)
@given(st.binary(max_size=200))
def test_decoding_random_bytes_raises_only_command_decode_error(data: bytes) -> None:
    with pytest.raises(CommandDecodeError):
        decode_command(data)


@settings(max_examples=300)
@given(JSON)
def test_decoding_random_json_raises_only_command_decode_error(value: Any) -> None:
    with pytest.raises(CommandDecodeError):
        decode_command(json.dumps(value).encode())


@settings(max_examples=300)
@given(any_commands(), st.data())
def test_decoding_a_command_with_one_field_replaced_gives_a_command_or_command_decode_error(
    command: Command, data: st.DataObject
) -> None:
    obj = json.loads(encode_command(command))
    key = data.draw(st.sampled_from(sorted(obj)))
    obj[key] = data.draw(JSON)
    if data.draw(st.booleans()):
        obj[data.draw(st.text(max_size=5))] = data.draw(JSON)
    try:
        decoded = decode_command(json.dumps(obj).encode())
    except CommandDecodeError:
        return
    assert encode_command(decoded)  # whatever decodes is well typed enough to encode again


@settings(max_examples=300)
@given(any_commands(), st.data())
def test_decoding_a_damaged_command_gives_a_command_or_command_decode_error(
    command: Command, data: st.DataObject
) -> None:
    raw = bytearray(encode_command(command))
    position = data.draw(st.integers(0, len(raw) - 1))
    if data.draw(st.booleans()):
        raw[position] = data.draw(st.integers(0, 255))
    else:
        del raw[position:]
    try:
        decode_command(bytes(raw))
    except CommandDecodeError:
        pass


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"null",
        b"[]",
        b'{"v":1}',
        b'{"t":"allocate_producer_ids","count":1}',
        b'{"v":"1","t":"allocate_producer_ids","count":1}',
        b'{"v":0,"t":"allocate_producer_ids","count":1}',
        b'{"v":1,"t":"allocate_producer_ids"}',
        b'{"v":1,"t":"allocate_producer_ids","count":1,"extra":2}',
        b'{"v":1,"t":"allocate_producer_ids","count":1.0}',
        b'{"v":1,"t":"allocate_producer_ids","count":true}',
        b'{"v":1,"t":"allocate_producer_ids","count":NaN}',
        b'{"v":1,"t":"allocate_producer_ids","count":Infinity}',
        b'{"v":1,"t":"allocate_producer_ids","count":' + b"9" * 5000 + b"}",
        b'{"v":1,"t":"allocate_producer_ids","count":99999999999999999999}',
        b'{"v":1,"t":"set_node_state","node_id":1,"state":"ACTIVE"}',
        b'{"v":1,"t":"delete_topic","name":"\xff","internal":false}',
        b"\xef\xbb\xbf{}",
        "{}".encode("utf-16"),
        b"[" * 100_000 + b"]" * 100_000,
        b'{"v":1,"t":"allocate_producer_ids","count":1} trailing',
    ],
)
def test_malformed_commands_are_refused(data: bytes) -> None:
    with pytest.raises(CommandDecodeError):
        decode_command(data)


def test_commands_from_newer_code_are_refused_as_unsupported_not_skipped() -> None:
    with pytest.raises(UnsupportedVersionError, match="version 2"):
        decode_command(b'{"v":2,"t":"allocate_producer_ids","count":1}')
    with pytest.raises(UnsupportedVersionError, match="split_partition"):
        decode_command(b'{"v":1,"t":"split_partition"}')


def test_decoding_accepts_any_bytes_like_object_and_nothing_else() -> None:
    data = encode_command(AllocateProducerIds(3))
    assert decode_command(memoryview(data)) == decode_command(bytearray(data)) == AllocateProducerIds(3)
    with pytest.raises(CommandDecodeError):
        decode_command(data.decode())  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------- snapshots


def test_a_snapshot_round_trips_exactly() -> None:
    state = sample_state()
    restored = decode_snapshot(encode_snapshot(state))
    assert restored == state
    assert encode_snapshot(restored) == encode_snapshot(state)
    assert decode_snapshot(encode_snapshot(ClusterState())) == ClusterState()


@settings(max_examples=100, deadline=None)
@given(LOGS)
def test_a_snapshot_of_any_reachable_state_round_trips_exactly(log: tuple[Command, ...]) -> None:
    state = ClusterState()
    for index, command in enumerate(log, start=1):
        state, _ = apply(state, index, command)
    data = encode_snapshot(state)
    assert decode_snapshot(data) == state
    assert encode_snapshot(decode_snapshot(data)) == data


def test_a_snapshot_is_versioned_and_checksummed() -> None:
    data = encode_snapshot(sample_state())
    magic, version, crc = struct.unpack_from("<4sBI", data)
    assert (magic, version, crc) == (b"MRCS", 1, zlib.crc32(data[9:]))
    body = json.loads(zlib.decompress(data[9:]))
    assert body["topics"][0]["partitions"][1] == [2, [2, 3, 4], [1], 2]


def _snapshot_of(body: Any, version: int = 1) -> bytes:
    compressed = zlib.compress(json.dumps(body).encode())
    return struct.pack("<4sBI", b"MRCS", version, zlib.crc32(compressed)) + compressed


def test_a_snapshot_from_newer_code_is_unsupported() -> None:
    with pytest.raises(UnsupportedVersionError):
        decode_snapshot(_snapshot_of({}, version=2))


@pytest.mark.parametrize("change", ["flip", "truncate", "magic", "version0", "append"])
def test_a_damaged_snapshot_is_refused(change: str) -> None:
    data = bytearray(encode_snapshot(sample_state()))
    if change == "flip":
        data[len(data) // 2] ^= 0x40
    elif change == "truncate":
        del data[-3:]
    elif change == "magic":
        data[0:4] = b"XXXX"
    elif change == "version0":
        data[4] = 0
    else:
        data += b"\0"
    with pytest.raises(CommandDecodeError):
        decode_snapshot(bytes(data))


def test_a_snapshot_of_an_inconsistent_state_is_refused() -> None:
    body = json.loads(zlib.decompress(encode_snapshot(sample_state())[9:]))
    body["topics"][0]["partitions"][0][1] = [1, 1]  # a node twice in one replica set
    with pytest.raises(CommandDecodeError, match="inconsistent"):
        decode_snapshot(_snapshot_of(body))
    body = json.loads(zlib.decompress(encode_snapshot(sample_state())[9:]))
    body["next_group_id"] = 2  # group ids 2 and 3 would be handed out again
    with pytest.raises(CommandDecodeError, match="group id"):
        decode_snapshot(_snapshot_of(body))


@settings(max_examples=200)
@given(st.binary(max_size=300))
def test_decoding_random_bytes_as_a_snapshot_raises_only_command_decode_error(data: bytes) -> None:
    with pytest.raises(CommandDecodeError):
        decode_snapshot(data)
    with pytest.raises(CommandDecodeError):
        decode_snapshot(b"MRCS\x01" + data)


@settings(max_examples=200)
@given(JSON)
def test_a_well_framed_snapshot_of_random_json_raises_only_command_decode_error(value: Any) -> None:
    with pytest.raises(CommandDecodeError):
        decode_snapshot(_snapshot_of(value))


@settings(max_examples=200)
@given(st.data())
def test_a_snapshot_with_one_field_replaced_decodes_consistently_or_not_at_all(data: st.DataObject) -> None:
    body = json.loads(zlib.decompress(encode_snapshot(sample_state())[9:]))
    target = body
    while True:
        container = target
        key = data.draw(st.sampled_from(list(range(len(target))) if isinstance(target, list) else sorted(target)))
        target = container[key]
        if not isinstance(target, list | dict) or not target or data.draw(st.booleans()):
            container[key] = data.draw(JSON)
            break
    try:
        state = decode_snapshot(_snapshot_of(body))
    except CommandDecodeError:
        return
    assert state.invariant_violations() == []
