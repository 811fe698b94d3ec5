"""The wire format: struct-packed, big-endian, versioned. No pickle, no JSON.

A UDP packet is a header and one or more framed messages, so every packet is a compound packet: the message
that has to go (ping, ack, ...) comes first and gossip is piggybacked behind it until the packet is full::

    packet  = magic 'S' (u8) | version (u8) | cluster tag (u32) | sender node id (u64)
              | live members the sender knows (u32) | frame+
    frame   = type (u8) | body length (u16) | body
    PING          seq (u32) | target node id (u64)
    INDIRECT_PING seq (u32) | target node id (u64) | flags (u8, bit 0: want nack) | target address (text)
    ACK, NACK     seq (u32)
    SUSPECT, DEAD incarnation (u32) | node id (u64) | accuser node id (u64)
    ALIVE         incarnation (u32) | node id (u64) | gossip, client, peer addresses, rack (text) | capacity (f64)
                  [| host (text)]
    text    = length (u8) | UTF-8 bytes

The host is written only when it is not empty, so members without one send the bytes of the first format and
older members still read them; a body that ends after the capacity has the host ``""``.

A push-pull state (TCP, framed by the transport with a u32 length) lists every member this node knows::

    state   = magic 'P' (u8) | version (u8) | cluster tag (u32) | sender (u64) | flags (u8, bit 0: join,
              informational; bit 1: entries carry a host) | count (u32) | entry*
    entry   = member state (u8) | ALIVE body (with the host when bit 1 is set, without it otherwise)

Bit 1 is set only when some entry has a host; older members refuse such a state as having unknown flags.

Decoders check every length, range and string and raise :class:`MembershipCodecError`; they never raise anything else.
"""

from __future__ import annotations

import enum
import functools
import struct
import zlib
from collections.abc import Iterable
from dataclasses import dataclass

from membership._types import MAX_TEXT_BYTES, MemberMeta, MemberState, split_host_port
from membership.errors import MembershipCodecError, MetadataError

__all__ = [
    "HEADER_BYTES",
    "FRAME_HEADER_BYTES",
    "MessageType",
    "Ping",
    "IndirectPing",
    "Ack",
    "Nack",
    "Suspect",
    "Alive",
    "Dead",
    "Message",
    "Packet",
    "StateEntry",
    "PushPull",
    "cluster_tag",
    "encode_message",
    "encode_packet",
    "decode_packet",
    "encode_push_pull",
    "decode_push_pull",
]

_PACKET_MAGIC = 0x53  # 'S'
_STATE_MAGIC = 0x50  # 'P'
VERSION = 1

_HEADER = struct.Struct(">BBIQ")
_MEMBERS = struct.Struct(">I")
_FRAME = struct.Struct(">BH")
_PING = struct.Struct(">IQ")
_INDIRECT = struct.Struct(">IQB")
_SEQ = struct.Struct(">I")
_ACCUSE = struct.Struct(">IQQ")
_ALIVE_HEAD = struct.Struct(">IQ")
_CAPACITY = struct.Struct(">d")
_STATE_HEAD = struct.Struct(">BI")
_STATE_BYTE = struct.Struct(">B")

HEADER_BYTES = _HEADER.size + _MEMBERS.size
FRAME_HEADER_BYTES = _FRAME.size
_SMALLEST_ENTRY = 1 + _ALIVE_HEAD.size + 4 + _CAPACITY.size
_WANT_NACK = 0x01
_JOIN = 0x01
_WITH_HOSTS = 0x02


class MessageType(enum.IntEnum):
    PING = 1
    INDIRECT_PING = 2
    ACK = 3
    NACK = 4
    SUSPECT = 5
    ALIVE = 6
    DEAD = 7


@dataclass(frozen=True, slots=True)
class Ping:
    seq: int
    target: int
    """Node id the sender means to reach; a receiver with another id ignores the ping."""


@dataclass(frozen=True, slots=True)
class IndirectPing:
    seq: int
    target: int
    target_addr: str
    want_nack: bool


@dataclass(frozen=True, slots=True)
class Ack:
    seq: int


@dataclass(frozen=True, slots=True)
class Nack:
    """A helper of an indirect probe heard nothing from the target: the asker's own network is fine."""

    seq: int


@dataclass(frozen=True, slots=True)
class Suspect:
    incarnation: int
    node: int
    accuser: int


@dataclass(frozen=True, slots=True)
class Dead:
    """``accuser == node`` means the node left gracefully."""

    incarnation: int
    node: int
    accuser: int


@dataclass(frozen=True, slots=True)
class Alive:
    incarnation: int
    meta: MemberMeta
    gossip_addr: str

    @property
    def node(self) -> int:
        return self.meta.node_id


Message = Ping | IndirectPing | Ack | Nack | Suspect | Alive | Dead


@dataclass(frozen=True, slots=True)
class Packet:
    cluster_tag: int
    sender: int
    sender_members: int
    """How many live members the sender knows: a cheap digest that exposes members who missed news."""
    messages: tuple[Message, ...]


@dataclass(frozen=True, slots=True)
class StateEntry:
    """One member in a push-pull state."""

    incarnation: int
    meta: MemberMeta
    gossip_addr: str
    state: MemberState


@dataclass(frozen=True, slots=True)
class PushPull:
    cluster_tag: int
    sender: int
    join: bool
    entries: tuple[StateEntry, ...]


def cluster_tag(cluster_name: str) -> int:
    """The 32-bit tag every packet carries so clusters sharing a network ignore each other."""
    return zlib.crc32(cluster_name.encode())


# Encoding


def _text(value: str) -> bytes:
    raw = value.encode()
    if len(raw) > MAX_TEXT_BYTES:
        raise MembershipCodecError(f"text longer than {MAX_TEXT_BYTES} bytes: {value[:40]!r}...")
    return bytes((len(raw),)) + raw


def _member_body(incarnation: int, meta: MemberMeta, gossip_addr: str, with_host: bool) -> bytes:
    return b"".join(
        (
            _ALIVE_HEAD.pack(incarnation, meta.node_id),
            _text(gossip_addr),
            _text(meta.client_addr),
            _text(meta.peer_addr),
            _text(meta.rack),
            _CAPACITY.pack(meta.capacity),
            _text(meta.host) if with_host else b"",
        )
    )


def encode_message(message: Message) -> bytes:
    """One framed message, ready to be packed into a packet."""
    try:
        match message:
            case Ping(seq, target):
                kind, body = MessageType.PING, _PING.pack(seq, target)
            case IndirectPing(seq, target, target_addr, want_nack):
                flags = _WANT_NACK if want_nack else 0
                kind, body = MessageType.INDIRECT_PING, _INDIRECT.pack(seq, target, flags) + _text(target_addr)
            case Ack(seq):
                kind, body = MessageType.ACK, _SEQ.pack(seq)
            case Nack(seq):
                kind, body = MessageType.NACK, _SEQ.pack(seq)
            case Suspect(incarnation, node, accuser):
                kind, body = MessageType.SUSPECT, _ACCUSE.pack(incarnation, node, accuser)
            case Dead(incarnation, node, accuser):
                kind, body = MessageType.DEAD, _ACCUSE.pack(incarnation, node, accuser)
            case Alive(incarnation, meta, gossip_addr):
                kind, body = MessageType.ALIVE, _member_body(incarnation, meta, gossip_addr, bool(meta.host))
            case _:
                raise MembershipCodecError(f"not a message: {message!r}")
    except struct.error as exc:
        raise MembershipCodecError(f"field out of range in {message!r}: {exc}") from exc
    return _FRAME.pack(kind, len(body)) + body


def encode_packet(tag: int, sender: int, sender_members: int, frames: Iterable[bytes]) -> bytes:
    """A packet from already framed messages (see :func:`encode_message`)."""
    try:
        header = _HEADER.pack(_PACKET_MAGIC, VERSION, tag, sender) + _MEMBERS.pack(sender_members)
    except struct.error as exc:
        raise MembershipCodecError(f"header field out of range: {exc}") from exc
    return header + b"".join(frames)


def encode_push_pull(state: PushPull) -> bytes:
    try:
        with_hosts = any(entry.meta.host for entry in state.entries)
        flags = (_JOIN if state.join else 0) | (_WITH_HOSTS if with_hosts else 0)
        head = _HEADER.pack(_STATE_MAGIC, VERSION, state.cluster_tag, state.sender) + _STATE_HEAD.pack(
            flags, len(state.entries)
        )
        parts = [head]
        for entry in state.entries:
            parts.append(_STATE_BYTE.pack(entry.state))
            parts.append(_member_body(entry.incarnation, entry.meta, entry.gossip_addr, with_hosts))
    except struct.error as exc:
        raise MembershipCodecError(f"field out of range in push-pull state: {exc}") from exc
    return b"".join(parts)


# Decoding


def _read_text(data: bytes, offset: int, end: int) -> tuple[str, int]:
    if offset >= end:
        raise MembershipCodecError("text length missing")
    length = data[offset]
    offset += 1
    if offset + length > end:
        raise MembershipCodecError("text runs past its message")
    try:
        return data[offset : offset + length].decode(), offset + length
    except UnicodeDecodeError as exc:
        raise MembershipCodecError("text is not UTF-8") from exc


def _read_member(data: bytes, offset: int, end: int, with_host: bool) -> tuple[int, MemberMeta, str, int]:
    """One member record; ``with_host``: it ends with a host (a push-pull entry whose state says so, or an
    alive body longer than the first format's)."""
    if offset + _ALIVE_HEAD.size > end:
        raise MembershipCodecError("member record truncated")
    incarnation, node = _ALIVE_HEAD.unpack_from(data, offset)
    offset += _ALIVE_HEAD.size
    gossip_addr, offset = _read_text(data, offset, end)
    client_addr, offset = _read_text(data, offset, end)
    peer_addr, offset = _read_text(data, offset, end)
    rack, offset = _read_text(data, offset, end)
    if offset + _CAPACITY.size > end:
        raise MembershipCodecError("member record truncated")
    (capacity,) = _CAPACITY.unpack_from(data, offset)
    offset += _CAPACITY.size
    host = ""
    if with_host:
        host, offset = _read_text(data, offset, end)
    try:
        meta = MemberMeta(node, client_addr, peer_addr, rack, capacity, host)
        split_host_port(gossip_addr)
    except (MetadataError, ValueError) as exc:
        raise MembershipCodecError(f"bad member record: {exc}") from exc
    return incarnation, meta, gossip_addr, offset


def _nonzero(node: int, what: str) -> int:
    if node == 0:
        raise MembershipCodecError(f"{what} node id is 0")
    return node


# Cached: the same alive message reaches a member many times while it spreads. Errors are not cached.
@functools.lru_cache(maxsize=4096)
def _decode_alive(body: bytes) -> Alive:
    incarnation, meta, gossip_addr, offset = _read_member(body, 0, len(body), with_host=False)
    if offset != len(body):  # a host follows the first format's fields
        incarnation, meta, gossip_addr, offset = _read_member(body, 0, len(body), with_host=True)
    if offset != len(body):
        raise MembershipCodecError("trailing bytes in alive message")
    return Alive(incarnation, meta, gossip_addr)


def _decode_body(kind: int, data: bytes, offset: int, end: int) -> Message:
    size = end - offset
    if kind == MessageType.PING:
        if size != _PING.size:
            raise MembershipCodecError(f"ping body is {size} bytes")
        seq, target = _PING.unpack_from(data, offset)
        return Ping(seq, _nonzero(target, "ping target"))
    if kind in (MessageType.ACK, MessageType.NACK):
        if size != _SEQ.size:
            raise MembershipCodecError(f"ack/nack body is {size} bytes")
        (seq,) = _SEQ.unpack_from(data, offset)
        return Ack(seq) if kind == MessageType.ACK else Nack(seq)
    if kind in (MessageType.SUSPECT, MessageType.DEAD):
        if size != _ACCUSE.size:
            raise MembershipCodecError(f"suspect/dead body is {size} bytes")
        incarnation, node, accuser = _ACCUSE.unpack_from(data, offset)
        _nonzero(node, "accused")
        _nonzero(accuser, "accuser")
        return Suspect(incarnation, node, accuser) if kind == MessageType.SUSPECT else Dead(incarnation, node, accuser)
    if kind == MessageType.ALIVE:
        return _decode_alive(data[offset:end])
    if kind == MessageType.INDIRECT_PING:
        if size < _INDIRECT.size:
            raise MembershipCodecError("indirect ping truncated")
        seq, target, flags = _INDIRECT.unpack_from(data, offset)
        if flags & ~_WANT_NACK:
            raise MembershipCodecError(f"unknown indirect ping flags {flags:#x}")
        target_addr, offset = _read_text(data, offset + _INDIRECT.size, end)
        if offset != end:
            raise MembershipCodecError("trailing bytes in indirect ping")
        try:
            split_host_port(target_addr)
        except ValueError as exc:
            raise MembershipCodecError(f"bad indirect ping target: {exc}") from exc
        return IndirectPing(seq, _nonzero(target, "indirect ping target"), target_addr, bool(flags & _WANT_NACK))
    raise MembershipCodecError(f"unknown message type {kind}")


def _read_header(data: bytes, magic: int, what: str) -> tuple[int, int]:
    if len(data) < _HEADER.size:
        raise MembershipCodecError(f"{what} shorter than its header ({len(data)} bytes)")
    found_magic, version, tag, sender = _HEADER.unpack_from(data, 0)
    if found_magic != magic:
        raise MembershipCodecError(f"not a {what} (magic {found_magic:#x})")
    if version != VERSION:
        raise MembershipCodecError(f"{what} version {version} is not {VERSION}")
    return tag, _nonzero(sender, "sender")


def decode_packet(data: bytes | bytearray | memoryview) -> Packet:
    """Decode a whole packet or raise :class:`MembershipCodecError`; a packet is accepted or dropped as a unit."""
    data = bytes(data)
    tag, sender = _read_header(data, _PACKET_MAGIC, "packet")
    if len(data) < HEADER_BYTES:
        raise MembershipCodecError("packet header truncated")
    (sender_members,) = _MEMBERS.unpack_from(data, _HEADER.size)
    messages: list[Message] = []
    offset, total = HEADER_BYTES, len(data)
    while offset < total:
        if offset + _FRAME.size > total:
            raise MembershipCodecError("frame header truncated")
        kind, length = _FRAME.unpack_from(data, offset)
        offset += _FRAME.size
        end = offset + length
        if end > total:
            raise MembershipCodecError("frame runs past the packet")
        messages.append(_decode_body(kind, data, offset, end))
        offset = end
    if not messages:
        raise MembershipCodecError("packet has no messages")
    return Packet(tag, sender, sender_members, tuple(messages))


def decode_push_pull(data: bytes | bytearray | memoryview) -> PushPull:
    """Decode a push-pull state or raise :class:`MembershipCodecError`."""
    data = bytes(data)
    tag, sender = _read_header(data, _STATE_MAGIC, "push-pull state")
    offset, total = _HEADER.size, len(data)
    if offset + _STATE_HEAD.size > total:
        raise MembershipCodecError("push-pull state truncated")
    flags, count = _STATE_HEAD.unpack_from(data, offset)
    offset += _STATE_HEAD.size
    if flags & ~(_JOIN | _WITH_HOSTS):
        raise MembershipCodecError(f"unknown push-pull flags {flags:#x}")
    if count * _SMALLEST_ENTRY > total - offset:
        raise MembershipCodecError(f"push-pull state claims {count} members in {total - offset} bytes")
    entries: list[StateEntry] = []
    for _ in range(count):
        raw_state = data[offset] if offset < total else -1
        try:
            state = MemberState(raw_state)
        except ValueError as exc:
            raise MembershipCodecError(f"unknown member state {raw_state}") from exc
        incarnation, meta, gossip_addr, offset = _read_member(data, offset + 1, total, bool(flags & _WITH_HOSTS))
        entries.append(StateEntry(incarnation, meta, gossip_addr, state))
    if offset != total:
        raise MembershipCodecError("trailing bytes after push-pull state")
    return PushPull(tag, sender, bool(flags & _JOIN), tuple(entries))
