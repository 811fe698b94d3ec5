"""The wire codec: every message round-trips, and any other bytes are refused with MembershipCodecError only."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from membership import MemberMeta, MembershipCodecError, MemberState
from membership._wire import (
    HEADER_BYTES,
    Ack,
    Alive,
    Dead,
    Message,
    MessageType,
    Ping,
    PushPull,
    StateEntry,
    Suspect,
    cluster_tag,
    decode_packet,
    decode_push_pull,
    encode_message,
    encode_packet,
    encode_push_pull,
)

from .strategies import NODE_ID, U32, messages, push_pulls

META = MemberMeta(5, "127.0.0.1:9092", "127.0.0.1:9093", "rack-a", 1.5)


def _packet(*messages: Message, tag: int = 7, sender: int = 5, members: int = 3) -> bytes:
    return encode_packet(tag, sender, members, [encode_message(m) for m in messages])


@given(tag=U32, sender=NODE_ID, members=U32, batch=st.lists(messages(), min_size=1, max_size=12))
def test_every_packet_round_trips(tag: int, sender: int, members: int, batch: list[Message]) -> None:
    packet = decode_packet(_packet(*batch, tag=tag, sender=sender, members=members))
    assert (packet.cluster_tag, packet.sender, packet.sender_members) == (tag, sender, members)
    assert list(packet.messages) == batch


@given(state=push_pulls())
def test_every_push_pull_state_round_trips(state: PushPull) -> None:
    assert decode_push_pull(encode_push_pull(state)) == state


@given(data=st.binary(max_size=300))
def test_random_bytes_are_refused_with_codec_error_only(data: bytes) -> None:
    for decode in (decode_packet, decode_push_pull):
        try:
            decode(data)
        except MembershipCodecError:
            pass


@given(batch=st.lists(messages(), min_size=1, max_size=4), data=st.data())
def test_corrupted_packets_decode_or_raise_codec_error(batch: list[Message], data: st.DataObject) -> None:
    raw = bytearray(_packet(*batch))
    for _ in range(data.draw(st.integers(1, 4))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    try:
        decode_packet(bytes(raw))
    except MembershipCodecError:
        pass


def test_every_truncation_of_a_packet_is_refused() -> None:
    raw = _packet(Ping(1, 2), Alive(3, META, "127.0.0.1:7946"), Suspect(1, 2, 3))
    for cut in range(len(raw)):
        if cut in (HEADER_BYTES + 15, HEADER_BYTES + 15 + len(encode_message(Alive(3, META, "127.0.0.1:7946")))):
            continue  # cut exactly between frames: a shorter valid packet
        with pytest.raises(MembershipCodecError):
            decode_packet(raw[:cut])


def test_every_truncation_of_a_push_pull_state_is_refused() -> None:
    raw = encode_push_pull(PushPull(7, 5, True, (StateEntry(2, META, "127.0.0.1:7946", MemberState.SUSPECT),)))
    for cut in range(len(raw)):
        with pytest.raises(MembershipCodecError):
            decode_push_pull(raw[:cut])


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"", "shorter than its header"),
        (b"X" + _packet(Ack(1))[1:], "not a packet"),
        (_packet(Ack(1))[:1] + b"\x09" + _packet(Ack(1))[2:], "version"),
        (_packet(Ack(1))[:HEADER_BYTES], "no messages"),
        (_packet(Ack(1)) + b"\x00", "frame header truncated"),
        (_packet(Ack(1))[:HEADER_BYTES] + b"\x63\x00\x00", "unknown message type"),
        (_packet(Ack(1))[:HEADER_BYTES] + b"\x03\x00\x05\x00\x00\x00\x00\x00", "ack/nack body"),
        (_packet(Ping(1, 2))[:-1] + b"\x00", "ping target node id is 0"),
        (_packet(Ack(1), sender=1)[:6] + bytes(8) + _packet(Ack(1))[14:], "sender node id is 0"),
    ],
)
def test_malformed_packets_say_what_is_wrong(raw: bytes, reason: str) -> None:
    with pytest.raises(MembershipCodecError, match=reason):
        decode_packet(raw)


def test_text_that_is_not_utf8_is_refused() -> None:
    raw = bytearray(_packet(Alive(1, META, "127.0.0.1:7946")))
    rack_at = raw.index(b"rack-a")
    raw[rack_at] = 0xFF
    with pytest.raises(MembershipCodecError, match="UTF-8"):
        decode_packet(bytes(raw))


def test_an_alive_message_with_bad_metadata_is_refused() -> None:
    raw = _packet(Alive(1, META, "127.0.0.1:7946")).replace(b"127.0.0.1:9092", b"127.0.0.1:0000")
    with pytest.raises(MembershipCodecError, match="client_addr"):
        decode_packet(raw)


def test_out_of_range_fields_cannot_be_encoded() -> None:
    with pytest.raises(MembershipCodecError):
        encode_message(Ack(2**32))
    with pytest.raises(MembershipCodecError):
        encode_message(Dead(-1, 1, 1))


def test_a_ping_is_small_and_an_alive_fits_many_times_in_a_packet() -> None:
    assert len(_packet(Ping(1, 2))) == HEADER_BYTES + 3 + 12
    alive = encode_message(Alive(1, META, "127.0.0.1:7946"))
    assert len(alive) < 80
    assert (1400 - HEADER_BYTES) // len(alive) >= 15


def test_the_cluster_tag_depends_on_the_name() -> None:
    assert cluster_tag("multiraft") == cluster_tag("multiraft")
    assert cluster_tag("multiraft") != cluster_tag("staging")


# The first format had no host: members without one still send exactly those bytes, and packets and states
# of the first format still decode (to host "").
_FIRST_FORMAT_ALIVE = bytes.fromhex(
    "00000001"
    "0000000000000005"
    "0e"
    + b"127.0.0.1:7946".hex()
    + "0e"
    + b"127.0.0.1:9092".hex()
    + "0e"
    + b"127.0.0.1:9093".hex()
    + "06"
    + b"rack-a".hex()
    + "3ff8000000000000"
)


def _alive_frame(body: bytes) -> bytes:
    return bytes((MessageType.ALIVE,)) + len(body).to_bytes(2) + body


def test_an_alive_without_a_host_is_encoded_in_the_first_format() -> None:
    assert encode_message(Alive(1, META, "127.0.0.1:7946")) == _alive_frame(_FIRST_FORMAT_ALIVE)


def test_a_first_format_alive_decodes_with_an_empty_host() -> None:
    raw = encode_packet(7, 5, 3, [_alive_frame(_FIRST_FORMAT_ALIVE)])
    (alive,) = decode_packet(raw).messages
    assert alive == Alive(1, META, "127.0.0.1:7946") and META.host == ""


def test_an_alive_carries_the_host_after_the_capacity() -> None:
    meta = MemberMeta(5, "127.0.0.1:9092", "127.0.0.1:9093", "rack-a", 1.5, host="machine-1")
    frame = encode_message(Alive(1, meta, "127.0.0.1:7946"))
    assert frame.endswith(_FIRST_FORMAT_ALIVE + b"\x09machine-1")
    assert decode_packet(encode_packet(7, 5, 3, [frame])).messages == (Alive(1, meta, "127.0.0.1:7946"),)


@pytest.mark.parametrize(
    ("tail", "reason"),
    [
        (b"\x0amachine-1", "text runs past its message"),
        (b"\x02\xff\xfe", "UTF-8"),
        (b"\x41" + b"h" * 65, "bad member record: host"),
        (b"\x01h\x00", "trailing bytes in alive message"),
    ],
)
def test_a_bad_host_is_refused_precisely(tail: bytes, reason: str) -> None:
    body = _FIRST_FORMAT_ALIVE + tail
    with pytest.raises(MembershipCodecError, match=reason):
        decode_packet(encode_packet(7, 5, 3, [_alive_frame(body)]))


def test_a_push_pull_state_carries_hosts_only_when_a_member_has_one() -> None:
    hosted = MemberMeta(6, "127.0.0.1:9094", "127.0.0.1:9095", "", 1.0, host="machine-1")
    without = PushPull(7, 5, False, (StateEntry(1, META, "127.0.0.1:7946", MemberState.ALIVE),))
    first_format = bytes.fromhex("5001000000070000000000000005000000000100") + _FIRST_FORMAT_ALIVE
    assert encode_push_pull(without) == first_format
    assert decode_push_pull(first_format) == without
    mixed = PushPull(7, 5, True, (*without.entries, StateEntry(2, hosted, "127.0.0.1:7947", MemberState.SUSPECT)))
    raw = encode_push_pull(mixed)
    assert raw[14] == 0x03  # join, and entries carry hosts (META's as "")
    assert decode_push_pull(raw) == mixed
    with pytest.raises(MembershipCodecError, match="unknown push-pull flags 0x4"):
        decode_push_pull(raw[:14] + b"\x04" + raw[15:])
