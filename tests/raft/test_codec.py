"""The wire format: every message type round-trips, payloads are never copied, garbage raises DecodeError only."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from multiraft.raft import (
    ConfChange,
    ConfChangeSingle,
    ConfChangeTransition,
    ConfChangeType,
    ConfState,
    DecodeError,
    EncodeError,
    Entry,
    EntryKind,
    HardState,
    Message,
    MessageType,
    Snapshot,
    SnapshotMeta,
    decode_conf_change,
    decode_conf_state,
    decode_hard_state,
    decode_message,
    decode_snapshot_meta,
    encode_conf_change,
    encode_conf_state,
    encode_hard_state,
    encode_message,
    encode_message_buffers,
    encode_snapshot_meta,
)

U64 = st.integers(0, 2**64 - 1)
IDS = st.integers(1, 2**64 - 1)
SMALL_IDS = st.lists(st.integers(1, 50), max_size=5)

entries = st.lists(
    st.builds(
        Entry,
        index=U64,
        term=U64,
        kind=st.sampled_from(EntryKind),
        timestamp_ms=st.integers(-(2**63), 2**63 - 1),
        payload=st.binary(max_size=64),
    ),
    max_size=6,
)
conf_states = st.builds(
    ConfState.of,
    voters=SMALL_IDS,
    learners=SMALL_IDS,
    voters_outgoing=SMALL_IDS,
    learners_next=SMALL_IDS,
    auto_leave=st.booleans(),
)
snapshots = st.builds(
    Snapshot, meta=st.builds(SnapshotMeta, index=U64, term=U64, conf_state=conf_states), data=st.binary(max_size=128)
)


ANY_TYPE = st.sampled_from(MessageType)


def messages(mtype: st.SearchStrategy[MessageType] = ANY_TYPE) -> st.SearchStrategy[Message]:
    return st.builds(
        Message,
        type=mtype,
        to=IDS,
        sender=IDS,
        term=U64,
        log_term=U64,
        index=U64,
        commit=U64,
        entries=entries,
        reject=st.booleans(),
        reject_hint=U64,
        snapshot=st.none() | snapshots,
        context=st.binary(max_size=32),
        quiesce=st.booleans(),
        leader_transfer=st.booleans(),
    )


@pytest.mark.parametrize("mtype", list(MessageType), ids=lambda t: t.name)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_every_message_type_round_trips(mtype: MessageType, data: st.DataObject) -> None:
    message = data.draw(messages(st.just(mtype)))
    decoded = decode_message(encode_message(message))
    assert decoded == message
    assert decode_message(b"".join(encode_message_buffers(message))) == message


@settings(max_examples=60, deadline=None)
@given(message=messages())
def test_decoded_payloads_are_zero_copy_slices_of_the_received_buffer(message: Message) -> None:
    buffer = encode_message(message)
    decoded = decode_message(buffer)
    for entry in decoded.entries:
        assert isinstance(entry.payload, memoryview)
        assert entry.payload.obj is buffer


def test_encoding_hands_the_payload_objects_themselves_to_the_transport() -> None:
    payloads: list[bytes | memoryview] = [b"a" * 1000, memoryview(b"b" * 10), b"c"]
    message = Message(
        type=MessageType.APP,
        to=2,
        sender=1,
        term=3,
        entries=[Entry(i + 1, 3, EntryKind.DATA, 0, p) for i, p in enumerate(payloads)],
    )
    buffers = encode_message_buffers(message)
    assert buffers[1:] == payloads
    assert all(a is b for a, b in zip(buffers[1:], payloads, strict=True))


@settings(max_examples=500, deadline=None)
@given(data=st.binary(max_size=300))
def test_decoding_garbage_raises_decode_error_and_nothing_else(data: bytes) -> None:
    try:
        decode_message(data)
    except DecodeError:
        pass


@settings(max_examples=120, deadline=None)
@given(message=messages(), data=st.data())
def test_truncated_or_corrupted_messages_raise_decode_error_and_nothing_else(
    message: Message, data: st.DataObject
) -> None:
    encoded = bytearray(encode_message(message))
    cut = data.draw(st.integers(0, len(encoded) - 1))
    with pytest.raises(DecodeError):
        decode_message(bytes(encoded[:cut]))
    with pytest.raises(DecodeError):
        decode_message(bytes(encoded) + b"\x00")
    position = data.draw(st.integers(0, len(encoded) - 1))
    encoded[position] ^= data.draw(st.integers(1, 255))
    try:
        decode_message(bytes(encoded))
    except DecodeError:
        pass


def test_decode_error_names_what_is_wrong() -> None:
    good = encode_message(Message(type=MessageType.HEARTBEAT, to=2, sender=1, term=1))
    with pytest.raises(DecodeError, match="wire version"):
        decode_message(b"\x09" + good[1:])
    with pytest.raises(DecodeError, match="message type"):
        decode_message(good[:1] + b"\xff" + good[2:])
    with pytest.raises(DecodeError, match="truncated"):
        decode_message(good[:10])
    with pytest.raises(DecodeError, match="trailing"):
        decode_message(good + b"!")


def test_values_outside_the_wire_format_raise_encode_error() -> None:
    with pytest.raises(EncodeError):
        encode_message(Message(type=MessageType.APP, to=2, sender=1, term=-1))
    with pytest.raises(EncodeError):
        encode_message(Message(type=MessageType.APP, to=0, sender=1))
    with pytest.raises(EncodeError):
        encode_hard_state(HardState(term=2**64))


@settings(max_examples=100, deadline=None)
@given(
    changes=st.lists(
        st.builds(ConfChangeSingle, st.sampled_from(ConfChangeType), st.integers(1, 2**64 - 1)), max_size=6
    ),
    transition=st.sampled_from(ConfChangeTransition),
    context=st.binary(max_size=40),
)
def test_conf_changes_round_trip(
    changes: list[ConfChangeSingle], transition: ConfChangeTransition, context: bytes
) -> None:
    change = ConfChange(tuple(changes), transition, context)
    assert decode_conf_change(encode_conf_change(change)) == change


@settings(max_examples=100, deadline=None)
@given(conf_state=conf_states, term=U64, vote=U64, commit=U64, index=U64)
def test_states_round_trip(conf_state: ConfState, term: int, vote: int, commit: int, index: int) -> None:
    assert decode_conf_state(encode_conf_state(conf_state)) == conf_state
    assert decode_hard_state(encode_hard_state(HardState(term, vote, commit))) == HardState(term, vote, commit)
    meta = SnapshotMeta(index, term, conf_state)
    assert decode_snapshot_meta(encode_snapshot_meta(meta)) == meta


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=120))
def test_decoding_garbage_states_raises_decode_error_and_nothing_else(data: bytes) -> None:
    for decode in (decode_conf_change, decode_conf_state, decode_hard_state, decode_snapshot_meta):
        try:
            decode(data)
        except DecodeError:
            pass


def test_decoding_accepts_any_bytes_like_input() -> None:
    message = Message(type=MessageType.APP, to=2, sender=1, entries=[Entry(1, 1, EntryKind.DATA, 0, b"xyz")], commit=1)
    encoded = encode_message(message)
    for buffer in (encoded, bytearray(encoded), memoryview(encoded), memoryview(bytearray(encoded))):
        assert decode_message(buffer) == message
    with pytest.raises(DecodeError):
        decode_message("not bytes")  # type: ignore[arg-type]


# Bytes written by the codec before it moved onto storage.binary: nodes of either version must read each other.
_GOLDEN_CONF_STATE = ConfState.of((1, 2, 3), (4,), (), (), False)
GOLDEN = {
    "message": (
        Message(
            type=MessageType.APP, to=2, sender=1, term=7, log_term=6, index=41, commit=40,
            entries=[Entry(42, 7, EntryKind.DATA, 1700000000000, b"hello"), Entry(43, 7, EntryKind.NOOP, -1, b"")],
            reject_hint=3, context=b"ctx", leader_transfer=True,
            snapshot=Snapshot(SnapshotMeta(40, 6, _GOLDEN_CONF_STATE), b"snap"),
        ),
        encode_message,
        decode_message,
        "01000c000200000000000000010000000000000007000000000000000600000000000000290000000000000028000000000000000300"
        "00000000000002000000030000006374782a000000000000000700000000000000000068e5cf8b010000050000002b000000000000"
        "00070000000000000002ffffffffffffffff0000000068656c6c6f28000000000000000600000000000000310000000400000000000000"
        "00030000000100000000000000000000000100000000000000020000000000000003000000000000000400000000000000736e6170",
    ),
    "conf change": (
        ConfChange(
            (ConfChangeSingle(ConfChangeType.ADD_VOTER, 5), ConfChangeSingle(ConfChangeType.REMOVE_NODE, 6)),
            ConfChangeTransition.JOINT_EXPLICIT,
            b"x",
        ),
        encode_conf_change,
        decode_conf_change,
        "0102020000000100000000050000000000000002060000000000000078",
    ),
    "hard state": (
        HardState(7, 2, 40), encode_hard_state, decode_hard_state, "070000000000000002000000000000002800000000000000"
    ),
    "snapshot meta": (
        SnapshotMeta(40, 6, _GOLDEN_CONF_STATE),
        encode_snapshot_meta,
        decode_snapshot_meta,
        "28000000000000000600000000000000310000000003000000010000000000000000000000010000000000000002000000000000000300"
        "0000000000000400000000000000",
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_the_wire_format_is_byte_for_byte_the_first_versions(name: str) -> None:
    value, encode, decode, golden = GOLDEN[name]
    assert encode(value).hex() == golden  # type: ignore[operator]
    assert decode(bytes.fromhex(golden)) == value
