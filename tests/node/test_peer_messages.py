"""Typed peer messages: every encoder/decoder pair is an exact inverse, and a decoder given anything malformed
raises InvalidArgumentError (naming the message and field) and nothing else; an undecodable error body becomes
an UnavailableError."""

from __future__ import annotations

import struct
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from multiraft import consumer_groups as g
from multiraft import controller as ctl
from multiraft import errors
from multiraft.errors import InvalidArgumentError, MultiraftError, UnavailableError
from multiraft.node.peer import consumer_group_messages as pg
from multiraft.node.peer import messages as pm
from multiraft.node.vocabulary.capacity import NodeCapacity
from multiraft.node.vocabulary.catchup import SegmentChunkRequest
from multiraft.node.vocabulary.consumer_groups import (
    GroupDelete,
    GroupDescribe,
    GroupHeartbeat,
    GroupJoin,
    GroupLeave,
    GroupListingRow,
    GroupOperation,
    GroupsList,
    GroupsRequest,
    GroupSync,
)
from multiraft.node.vocabulary.controller import (
    ControllerOutcome,
    ControllerRequest,
    CreatePartitionsRequest,
    CreateTopicRequest,
    NodeStateRequest,
)
from multiraft.node.vocabulary.offsets import OffsetRow, OffsetsCommit, OffsetsFetch, OffsetsList, OffsetsRequest
from multiraft.node.vocabulary.status import LeaderAnnouncement, MoveReport, PartitionStatus
from tests.controller.strategies import any_commands

FAST = settings(max_examples=100, deadline=None, derandomize=True, database=None)
FEW = settings(max_examples=30, deadline=None, derandomize=True, database=None)

I64 = st.integers(-(2**63), 2**63 - 1)
IDS = st.integers(0, 2**63 - 1)
TEXT = st.text(max_size=20)
TEXT_MAPS = st.dictionaries(TEXT, TEXT, max_size=4)
# Metadata keys "message" and "self" have their own test (test_an_error_whose_metadata_has_any_key_decodes).
METADATA = st.dictionaries(TEXT.filter(lambda key: key not in {"message", "self"}), TEXT, max_size=4)
FINITE = st.floats(allow_nan=False, allow_infinity=False)


@dataclass(frozen=True)
class Codec:
    """One message type: its encoder, decoder and a strategy of its values."""

    name: str
    encode: Callable[[Any], bytes]
    decode: Callable[[bytes], Any]
    values: st.SearchStrategy[Any]


create_topic_requests = st.builds(CreateTopicRequest, TEXT, I64, I64, TEXT_MAPS, st.booleans())
node_state_requests = st.builds(NodeStateRequest, IDS, st.sampled_from(ctl.NodeState), st.booleans())
create_partitions_requests = st.builds(CreatePartitionsRequest, TEXT, I64)
controller_requests = st.builds(
    ControllerRequest,
    st.one_of(any_commands(), create_topic_requests, node_state_requests, create_partitions_requests),
    st.booleans(),
    IDS,
)
controller_outcomes = st.builds(ControllerOutcome, TEXT, IDS, st.tuples(IDS, IDS), IDS)
partition_statuses = st.lists(
    st.builds(
        PartitionStatus,
        IDS,
        IDS,
        IDS,
        IDS,
        IDS,
        st.lists(I64, max_size=4).map(tuple),
        st.dictionaries(I64, I64, max_size=4),
        st.lists(I64, max_size=4).map(tuple),
        st.dictionaries(I64, st.tuples(I64, I64), max_size=3),
        IDS,
        IDS,
    ),
    max_size=4,
)
leaders = st.lists(st.builds(LeaderAnnouncement, IDS, IDS, IDS), max_size=6)
offset_rows = st.lists(st.builds(OffsetRow, TEXT, IDS, I64, TEXT, I64), max_size=4).map(tuple)
offsets_operations = st.one_of(
    st.builds(OffsetsCommit, TEXT, offset_rows, TEXT, I64, st.none() | TEXT),
    st.builds(OffsetsFetch, TEXT, st.none() | st.lists(st.tuples(TEXT, IDS), max_size=4).map(tuple)),
    st.just(OffsetsList()),
)
offsets_requests = st.builds(OffsetsRequest, IDS, offsets_operations)
moves = st.lists(st.builds(MoveReport, TEXT, IDS, IDS, IDS, IDS, TEXT, IDS, IDS, FINITE), max_size=4)
chunk_requests = st.builds(SegmentChunkRequest, *([IDS] * 8))
capacities = st.builds(NodeCapacity, *([IDS] * 6), TEXT, st.lists(I64, max_size=4).map(tuple))

OPTIONAL = st.none() | TEXT
tps = st.frozensets(st.tuples(TEXT, IDS), max_size=4)
texts = st.lists(TEXT, max_size=3).map(tuple)
subscriptions = st.builds(g.Subscription, texts, tps, I64, OPTIONAL, st.binary(max_size=8))
group_operations = st.one_of(
    st.builds(
        GroupJoin,
        TEXT,
        st.builds(g.JoinRequest, TEXT, I64, I64, texts, subscriptions, OPTIONAL, TEXT, TEXT, TEXT),
    ),
    st.builds(
        GroupSync,
        TEXT,
        st.builds(
            g.SyncRequest,
            TEXT,
            I64,
            st.lists(st.tuples(TEXT, tps), max_size=3).map(tuple),
            OPTIONAL,
            OPTIONAL,
            OPTIONAL,
        ),
    ),
    st.builds(GroupHeartbeat, TEXT, st.builds(g.HeartbeatRequest, TEXT, I64, OPTIONAL)),
    st.builds(GroupLeave, TEXT, st.builds(g.LeaveRequest, TEXT, OPTIONAL)),
    st.builds(GroupDescribe, TEXT),
    st.builds(GroupDelete, TEXT),
    st.just(GroupsList()),
)
join_replies = st.builds(
    g.JoinReply,
    TEXT,
    I64,
    OPTIONAL,
    OPTIONAL,
    TEXT,
    st.booleans(),
    st.lists(st.builds(g.MemberSubscription, TEXT, OPTIONAL, subscriptions), max_size=3).map(tuple),
)
sync_replies = st.builds(g.SyncReply, TEXT, I64, OPTIONAL, OPTIONAL, tps)
member_records = st.builds(g.MemberRecord, TEXT, OPTIONAL, TEXT, TEXT, I64, I64, texts, subscriptions, tps, tps, tps)
descriptions = st.builds(
    g.GroupMetadataRecord,
    TEXT,
    I64,
    st.sampled_from(g.GroupState),
    OPTIONAL,
    OPTIONAL,
    TEXT,
    st.lists(member_records, max_size=2).map(tuple),
    I64,
)
listings = st.lists(st.builds(GroupListingRow, TEXT, TEXT, TEXT, IDS), max_size=4).map(tuple)


def _answers(operation: GroupOperation) -> Codec:
    return Codec(
        f"groups answer to {type(operation).__name__}",
        lambda answer: pg.encode_groups_answer(operation, answer),
        lambda data: pg.decode_groups_answer(operation, data),
        {
            GroupJoin: join_replies,
            GroupSync: sync_replies,
            GroupDescribe: descriptions,
            GroupsList: listings,
        }[type(operation)],
    )


groups_requests = st.builds(GroupsRequest, IDS, group_operations)
GROUP_ANSWERS = [
    _answers(GroupJoin("g", g.JoinRequest("m", 1, 1, ()))),
    _answers(GroupSync("g", g.SyncRequest("m", 1))),
    _answers(GroupDescribe("g")),
    _answers(GroupsList()),
]

CODECS = [
    Codec(
        "groups request",
        pg.encode_groups_request,
        pg.decode_groups_request,
        st.builds(GroupsRequest, IDS, group_operations),
    ),
    *GROUP_ANSWERS,
    Codec("controller request", pm.encode_controller_request, pm.decode_controller_request, controller_requests),
    Codec("controller outcome", pm.encode_controller_outcome, pm.decode_controller_outcome, controller_outcomes),
    Codec("group ids", pm.encode_group_ids, pm.decode_group_ids, st.lists(IDS, max_size=8).map(tuple)),
    Codec("partition statuses", pm.encode_partition_statuses, pm.decode_partition_statuses, partition_statuses),
    Codec("leaders", pm.encode_leaders, pm.decode_leaders, leaders),
    Codec("offsets request", pm.encode_offsets_request, pm.decode_offsets_request, offsets_requests),
    Codec("offset rows", pm.encode_offset_rows, pm.decode_offset_rows, offset_rows),
    Codec("strings", pm.encode_strings, pm.decode_strings, st.lists(TEXT, max_size=6).map(tuple)),
    Codec("moves", pm.encode_moves, pm.decode_moves, moves),
    Codec("capacity", pm.encode_capacity, pm.decode_capacity, capacities),
    Codec("chunk request", pm.encode_chunk_request, pm.decode_chunk_request, chunk_requests),
]
BY_NAME = {codec.name: codec for codec in CODECS}
ALL_CODECS = pytest.mark.parametrize("codec", CODECS, ids=[c.name for c in CODECS])

ERROR_CLASSES = [
    value
    for name in errors.__all__
    if isinstance(value := getattr(errors, name), type) and issubclass(value, MultiraftError)
]


def encodings(codec: Codec) -> st.SearchStrategy[bytes]:
    return codec.values.map(codec.encode)


def test_every_message_type_has_a_codec_under_test() -> None:
    encoders = {name for name in pm.__all__ + pg.__all__ if name.startswith("encode_")} - {"encode_error"}
    tested = {c.encode.__name__ for c in CODECS} - {"<lambda>"} | ({"encode_groups_answer"} if GROUP_ANSWERS else set())
    assert encoders == tested


# --------------------------------------------------------------------------------------------- round trips


@ALL_CODECS
@FAST
@given(data=st.data())
def test_every_message_round_trips_exactly(codec: Codec, data: st.DataObject) -> None:
    value = data.draw(codec.values)
    encoded = codec.encode(value)
    decoded = codec.decode(encoded)
    assert decoded == value
    assert codec.encode(decoded) == encoded


@pytest.mark.parametrize(
    "command",
    [
        ctl.RegisterNode(ctl.NodeInfo(3, "h:1", "h:2", "h:3", "r1", 2.0, ctl.NodeState.ACTIVE)),
        ctl.CreateTopic("orders", {"retention.ms": "-1"}, (((1, 2), 1), ((2, 1), 2)), created_ms=5),
        ctl.DeleteTopic("orders"),
        ctl.AlterTopicConfigs("orders", {"segment.bytes": "4096"}, ("retention.ms",)),
        ctl.SetPartitionReplicas("orders", 0, (1, 2, 3), (4,), 1, (1, 2, 3), ()),
        ctl.SetNodeState(4, ctl.NodeState.DRAINING),
        ctl.AllocateProducerIds(100),
    ],
    ids=lambda command: type(command).__name__,
)
@pytest.mark.parametrize("forwarded", [False, True])
def test_a_controller_request_carries_each_command_type_and_the_forwarded_flag(
    command: ctl.Command, forwarded: bool
) -> None:
    request = ControllerRequest(command, forwarded)
    assert pm.decode_controller_request(pm.encode_controller_request(request)) == request


def test_a_node_state_request_keeps_its_state_force_flag_and_the_forwarders_origin() -> None:
    request = ControllerRequest(NodeStateRequest(3, ctl.NodeState.ACTIVE, force=True), forwarded=True, origin=2)
    assert pm.decode_controller_request(pm.encode_controller_request(request)) == request


def test_a_node_state_request_naming_an_unknown_state_is_refused() -> None:
    encoded = pm.encode_controller_request(ControllerRequest(NodeStateRequest(3, ctl.NodeState.ACTIVE)))
    with pytest.raises(InvalidArgumentError, match="state"):
        pm.decode_controller_request(encoded.replace(b"active", b"ghosts"))


def test_a_create_topic_request_keeps_its_configs_and_internal_flag() -> None:
    request = ControllerRequest(CreateTopicRequest("__consumer_offsets", 50, 3, {"cleanup.policy": "delete"}, True))
    assert pm.decode_controller_request(pm.encode_controller_request(request)) == request


def test_fetching_every_partition_and_fetching_none_are_different_requests() -> None:
    every = OffsetsRequest(7, OffsetsFetch("g", None))
    none = OffsetsRequest(7, OffsetsFetch("g", ()))
    assert pm.decode_offsets_request(pm.encode_offsets_request(every)) == every
    assert pm.decode_offsets_request(pm.encode_offsets_request(none)) == none


@pytest.mark.parametrize("cls", ERROR_CLASSES, ids=lambda cls: cls.__name__)
@FEW
@given(message=TEXT, metadata=METADATA)
def test_an_error_comes_back_as_the_same_class_with_its_reason_message_and_metadata(
    cls: type[MultiraftError], message: str, metadata: dict[str, str]
) -> None:
    error = cls.from_wire(message, metadata)
    decoded = pm.decode_error(pm.encode_error(error))
    assert type(decoded) is cls
    assert (decoded.reason, decoded.message, decoded.metadata) == (cls.reason, message, metadata)


def test_an_error_with_a_reason_this_version_does_not_know_is_a_plain_multiraft_error() -> None:
    body = pm.encode_error(MultiraftError.from_wire("from the future", {"k": "v"}))
    body = body.replace(b"INTERNAL", b"NEWTHING")
    decoded = pm.decode_error(body)
    assert type(decoded) is MultiraftError
    assert (decoded.message, decoded.metadata) == ("from the future", {"k": "v"})


def test_an_errors_typed_fields_survive_the_trip() -> None:
    decoded = pm.decode_error(pm.encode_error(errors.NotLeaderError("not here", leader_id=3, leader_address="h:1")))
    assert isinstance(decoded, errors.NotLeaderError)
    assert (decoded.leader_id, decoded.leader_address) == (3, "h:1")


# ------------------------------------------------------------------------------------------ malformed input


def only_invalid_argument(decode: Callable[[bytes], Any], data: bytes) -> None:
    """Decoding ``data`` either succeeds or raises InvalidArgumentError (anything else escapes the test)."""
    try:
        decode(data)
    except InvalidArgumentError as exc:
        assert exc.field, "the error names the field"


@ALL_CODECS
@FAST
@given(data=st.binary(max_size=200))
def test_random_bytes_fail_only_with_invalid_argument(codec: Codec, data: bytes) -> None:
    only_invalid_argument(codec.decode, data)


@ALL_CODECS
@FEW
@given(data=st.data())
def test_a_valid_encoding_with_random_changes_fails_only_with_invalid_argument(
    codec: Codec, data: st.DataObject
) -> None:
    encoded = bytearray(data.draw(encodings(codec)))
    for _ in range(data.draw(st.integers(1, 4))):
        if encoded:
            encoded[data.draw(st.integers(0, len(encoded) - 1))] = data.draw(st.integers(0, 255))
    only_invalid_argument(codec.decode, bytes(encoded))


@ALL_CODECS
@FEW
@given(data=st.data())
def test_every_truncation_of_a_valid_encoding_is_refused(codec: Codec, data: st.DataObject) -> None:
    encoded = data.draw(encodings(codec))
    for end in range(len(encoded)):
        with pytest.raises(InvalidArgumentError):
            codec.decode(encoded[:end])


@ALL_CODECS
@FEW
@given(data=st.data(), trailing=st.binary(min_size=1, max_size=9))
def test_a_valid_encoding_with_trailing_bytes_is_refused(codec: Codec, data: st.DataObject, trailing: bytes) -> None:
    with pytest.raises(InvalidArgumentError, match="trailing"):
        codec.decode(data.draw(encodings(codec)) + trailing)


LIAR = struct.pack("<I", 2**31)  # a list count no 10-byte body can hold


def _text(value: str) -> bytes:
    raw = value.encode()
    return struct.pack("<I", len(raw)) + raw


LYING_COUNTS = {
    "group ids": LIAR,
    "partition statuses": LIAR,
    "leaders": LIAR,
    "offset rows": LIAR,
    "strings": LIAR,
    "moves": LIAR,
    # The lie inside a message: the configs of a CreateTopicRequest, the rows of a commit and of a fetch.
    "controller request": b"\x00\x01" + _text("t") + struct.pack("<qq", 1, 1) + LIAR,
    "offsets request (commit)": struct.pack("<q", 1) + b"\x01" + _text("g") + LIAR,
    "offsets request (fetch)": struct.pack("<q", 1) + b"\x02" + _text("g") + b"\x01" + LIAR,
}


@pytest.mark.parametrize("name", sorted(LYING_COUNTS))
def test_a_list_count_that_lies_fails_fast_without_allocating(name: str) -> None:
    decode = BY_NAME[name.split(" (", maxsplit=1)[0]].decode
    body = LYING_COUNTS[name] + bytes(10)
    tracemalloc.start()
    try:
        with pytest.raises(InvalidArgumentError, match=str(2**31)):
            decode(body)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000


def test_a_count_one_above_what_the_body_holds_is_refused() -> None:
    encoded = pm.encode_group_ids([1, 2, 3])
    with pytest.raises(InvalidArgumentError, match="group_ids"):
        pm.decode_group_ids(struct.pack("<I", 4) + encoded[4:])


def test_an_error_whose_metadata_count_lies_becomes_unavailable() -> None:
    body = _text("NOT_LEADER") + _text("m") + LIAR + bytes(10)
    assert type(pm.decode_error(body)) is UnavailableError


def _negative_at(encoded: bytes, at: int) -> bytes:
    return encoded[:at] + struct.pack("<q", -1) + encoded[at + 8 :]


NEGATIVE_IDS = {
    # (the encoding of a valid value, the byte offset of an id field in it, the field's name)
    "group ids": (pm.encode_group_ids([1, 2]), 12, "group_ids"),
    "controller outcome": (pm.encode_controller_outcome(ControllerOutcome("t", 1, (2, 3), 4)), 5, "node_id"),
    "partition statuses": (
        pm.encode_partition_statuses([PartitionStatus(1, 2, 3, 4, 5, (), {}, (), {}, 6, 7)]),
        4 + 8,
        "leader",
    ),
    "leaders": (pm.encode_leaders([LeaderAnnouncement(1, 2, 3)]), 4 + 16, "leaders"),
    "offsets request": (pm.encode_offsets_request(OffsetsRequest(1, OffsetsList())), 0, "group_id"),
    "offset rows": (pm.encode_offset_rows([OffsetRow("t", 0, 5)]), 4 + 5, "partition"),
    "moves": (pm.encode_moves([MoveReport("t", 0, 1, 2, 3, "copy", 4, 5, 1.5)]), 4 + 5 + 16, "from_node"),
    "chunk request": (pm.encode_chunk_request(SegmentChunkRequest(1, 2, 3, 4, 5, 6, 7, 8)), 8 * 5, "length"),
}


@pytest.mark.parametrize("name", sorted(NEGATIVE_IDS))
def test_a_negative_id_is_refused_naming_the_field(name: str) -> None:
    codec = BY_NAME[name]
    encoded, at, field = NEGATIVE_IDS[name]
    codec.decode(encoded)  # the unpatched encoding is valid
    with pytest.raises(InvalidArgumentError, match=r"-1|>= 0|non-negative") as raised:
        codec.decode(_negative_at(encoded, at))
    assert raised.value.field.endswith(field)


@pytest.mark.parametrize("eta", [float("nan"), float("inf"), float("-inf")])
def test_a_move_eta_that_is_not_a_finite_number_is_refused(eta: float) -> None:
    encoded = pm.encode_moves([MoveReport("t", 0, 1, 2, 3, "copy", 4, 5, eta)])
    with pytest.raises(InvalidArgumentError, match="finite") as raised:
        pm.decode_moves(encoded)
    assert raised.value.field == "moves.eta_seconds"


MARK = "QZ"  # a two-byte text in each valid encoding below, replaced by bytes that are not UTF-8
NOT_UTF8 = b"\xc3\x28"

TEXT_FIELDS = {
    "controller request": pm.encode_controller_request(ControllerRequest(CreateTopicRequest(MARK, 1, 1))),
    "controller outcome": pm.encode_controller_outcome(ControllerOutcome(topic=MARK)),
    "offsets request": pm.encode_offsets_request(OffsetsRequest(1, OffsetsCommit(MARK, ()))),
    "offset rows": pm.encode_offset_rows([OffsetRow("t", 0, 1, metadata=MARK)]),
    "strings": pm.encode_strings(["a", MARK]),
    "moves": pm.encode_moves([MoveReport("t", 0, 1, 2, 3, MARK, 4, 5, 0.0)]),
}


@pytest.mark.parametrize("name", sorted(TEXT_FIELDS))
def test_a_text_that_is_not_utf8_is_refused(name: str) -> None:
    encoded = TEXT_FIELDS[name]
    assert encoded.count(MARK.encode()) == 1
    BY_NAME[name].decode(encoded)
    with pytest.raises(InvalidArgumentError, match="UTF-8"):
        BY_NAME[name].decode(encoded.replace(MARK.encode(), NOT_UTF8))


def test_an_error_whose_text_is_not_utf8_becomes_unavailable() -> None:
    body = pm.encode_error(errors.UnknownTopicError(MARK)).replace(MARK.encode(), NOT_UTF8)
    assert type(pm.decode_error(body)) is UnavailableError


def test_a_controller_request_of_an_unknown_type_is_refused() -> None:
    encoded = pm.encode_controller_request(ControllerRequest(ctl.DeleteTopic("t")))
    with pytest.raises(InvalidArgumentError, match="type"):
        pm.decode_controller_request(encoded[:1] + b"\x07" + encoded[2:])


def test_a_controller_request_whose_command_does_not_decode_is_refused() -> None:
    command = b'{"v":1,"t":"no_such_command"}'
    body = b"\x00\x00" + struct.pack("<I", len(command)) + command
    with pytest.raises(InvalidArgumentError) as raised:
        pm.decode_controller_request(body)
    assert raised.value.field == "controller request.command"


def test_an_offsets_request_of_an_unknown_operation_is_refused() -> None:
    encoded = pm.encode_offsets_request(OffsetsRequest(1, OffsetsList()))
    with pytest.raises(InvalidArgumentError, match="operation"):
        pm.decode_offsets_request(encoded[:8] + b"\x09")


def test_a_lag_map_with_an_odd_number_of_values_is_refused() -> None:
    encoded = pm.encode_partition_statuses([PartitionStatus(1, 2, 3, 4, 5, (), {7: 1}, (), {}, 6, 7)])
    lag_at = 4 + 7 * 8 + 4  # after the count, seven integers and the empty ISR list
    assert encoded[lag_at : lag_at + 20] == struct.pack("<I2q", 2, 7, 1)
    with pytest.raises(InvalidArgumentError, match="odd") as raised:
        pm.decode_partition_statuses(encoded[:lag_at] + struct.pack("<I3q", 3, 7, 1, 1) + encoded[lag_at + 20 :])
    assert raised.value.field == "partition status.lag"


def test_copies_that_are_not_triples_are_refused() -> None:
    encoded = pm.encode_partition_statuses([PartitionStatus(1, 2, 3, 4, 5, (), {}, (), {7: (1, 2)}, 6, 7)])
    copies_at = 4 + 7 * 8 + 4 + 4 + 4  # after the count, seven integers, and empty ISR, lag and acked
    assert encoded[copies_at:] == struct.pack("<I3q", 3, 7, 1, 2)
    with pytest.raises(InvalidArgumentError, match="triples"):
        pm.decode_partition_statuses(encoded[:copies_at] + struct.pack("<I2q", 2, 7, 1))


def test_leaders_that_are_not_triples_are_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="triples") as raised:
        pm.decode_leaders(struct.pack("<I2q", 2, 1, 2))
    assert raised.value.field == "leaders.leaders"


@FAST
@given(data=st.binary(max_size=200))
def test_decode_error_never_raises(data: bytes) -> None:
    assert isinstance(pm.decode_error(data, source="node 4"), MultiraftError)


@pytest.mark.parametrize("key", ["message", "self"])
def test_an_error_whose_metadata_has_any_key_decodes(key: str) -> None:
    # A well-formed error body: the metadata keys are strings like any other, whatever they spell.
    body = _text("NOT_LEADER") + _text("not here") + struct.pack("<I", 1) + _text(key) + _text("x")
    decoded = pm.decode_error(body, source="node 4")
    assert type(decoded) is errors.NotLeaderError
    assert (decoded.message, decoded.metadata) == ("not here", {key: "x"})


@FEW
@given(error=st.sampled_from(ERROR_CLASSES), message=TEXT)
def test_every_truncation_of_an_error_becomes_unavailable_naming_the_source(
    error: type[MultiraftError], message: str
) -> None:
    encoded = pm.encode_error(error.from_wire(message, {"k": "v"}))
    for end in range(len(encoded)):
        decoded = pm.decode_error(encoded[:end], source="node 4")
        assert type(decoded) is UnavailableError
        assert decoded.message.startswith("node 4 failed")
    decoded = pm.decode_error(encoded + b"\x00", source="node 4")
    assert type(decoded) is UnavailableError


# Bytes written before the codec moved onto storage.binary: nodes of either version must read each other.
PEER_GOLDEN = {
    "moves": (
        [MoveReport("t", 0, 1, 2, 3, "copy", 4, 5, 1.5)],
        "010000000100000074000000000000000001000000000000000200000000000000030000000000000004000000636f7079040000000000"
        "00000500000000000000000000000000f83f",
    ),
    "group ids": ((1, 2), "0200000001000000000000000200000000000000"),
}


@pytest.mark.parametrize("name", sorted(PEER_GOLDEN))
def test_the_peer_wire_format_is_byte_for_byte_the_first_versions(name: str) -> None:
    value, golden = PEER_GOLDEN[name]
    assert BY_NAME[name].encode(value).hex() == golden
    assert list(BY_NAME[name].decode(bytes.fromhex(golden))) == list(value)


def test_an_error_is_encoded_byte_for_byte_as_in_the_first_version() -> None:
    golden = "0d000000554e4b4e4f574e5f544f504943060000006f726465727300000000"
    assert pm.encode_error(errors.UnknownTopicError("orders")).hex() == golden
    assert isinstance(pm.decode_error(bytes.fromhex(golden)), errors.UnknownTopicError)
