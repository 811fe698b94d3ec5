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

Every field goes through the shared bounds-checked primitives of :mod:`storage.binary` (big-endian here).
Decoders check every length, range and string and raise :class:`MembershipCodecError`; they never raise anything
else: the primitives' errors are mapped to it at :func:`decode_packet` and :func:`decode_push_pull`.
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
from storage.binary import BIG, BinaryDecodeError, BinaryEncodeError, Reader, Writer

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


def _text(w: Writer, value: str) -> None:
    w.text(value, width=1, max_len=MAX_TEXT_BYTES)


def _member_body(w: Writer, incarnation: int, meta: MemberMeta, gossip_addr: str, with_host: bool) -> None:
    w.struct(_ALIVE_HEAD, incarnation, meta.node_id)
    _text(w, gossip_addr)
    _text(w, meta.client_addr)
    _text(w, meta.peer_addr)
    _text(w, meta.rack)
    w.f64(meta.capacity)
    if with_host:
        _text(w, meta.host)


def _body(message: Message) -> tuple[MessageType, bytes]:
    w = Writer(BIG)
    match message:
        case Ping(seq, target):
            kind = MessageType.PING
            w.struct(_PING, seq, target)
        case IndirectPing(seq, target, target_addr, want_nack):
            kind = MessageType.INDIRECT_PING
            w.struct(_INDIRECT, seq, target, _WANT_NACK if want_nack else 0)
            _text(w, target_addr)
        case Ack(seq):
            kind = MessageType.ACK
            w.struct(_SEQ, seq)
        case Nack(seq):
            kind = MessageType.NACK
            w.struct(_SEQ, seq)
        case Suspect(incarnation, node, accuser):
            kind = MessageType.SUSPECT
            w.struct(_ACCUSE, incarnation, node, accuser)
        case Dead(incarnation, node, accuser):
            kind = MessageType.DEAD
            w.struct(_ACCUSE, incarnation, node, accuser)
        case Alive(incarnation, meta, gossip_addr):
            kind = MessageType.ALIVE
            _member_body(w, incarnation, meta, gossip_addr, bool(meta.host))
        case _:
            raise MembershipCodecError(f"not a message: {message!r}")
    return kind, w.bytes()


def encode_message(message: Message) -> bytes:
    """One framed message, ready to be packed into a packet."""
    try:
        kind, body = _body(message)
        frame = Writer(BIG)
        frame.struct(_FRAME, kind, len(body))
        frame.put(body)
        return frame.bytes()
    except BinaryEncodeError as exc:
        raise MembershipCodecError(f"field out of range in {message!r}: {exc}") from exc


def encode_packet(tag: int, sender: int, sender_members: int, frames: Iterable[bytes]) -> bytes:
    """A packet from already framed messages (see :func:`encode_message`)."""
    w = Writer(BIG)
    try:
        w.struct(_HEADER, _PACKET_MAGIC, VERSION, tag, sender)
        w.struct(_MEMBERS, sender_members)
    except BinaryEncodeError as exc:
        raise MembershipCodecError(f"header field out of range: {exc}") from exc
    w.parts.extend(frames)
    return w.bytes()


def encode_push_pull(state: PushPull) -> bytes:
    try:
        with_hosts = any(entry.meta.host for entry in state.entries)
        flags = (_JOIN if state.join else 0) | (_WITH_HOSTS if with_hosts else 0)
        w = Writer(BIG)
        w.struct(_HEADER, _STATE_MAGIC, VERSION, state.cluster_tag, state.sender)
        w.struct(_STATE_HEAD, flags, len(state.entries))
        for entry in state.entries:
            w.u8(entry.state)
            _member_body(w, entry.incarnation, entry.meta, entry.gossip_addr, with_hosts)
    except BinaryEncodeError as exc:
        raise MembershipCodecError(f"field out of range in push-pull state: {exc}") from exc
    return w.bytes()


# Decoding


def _read_member(r: Reader, with_host: bool) -> tuple[int, MemberMeta, str]:
    """One member record; ``with_host``: it ends with a host (a push-pull entry whose state says so, or an
    alive body longer than the first format's)."""
    incarnation, node = r.struct(_ALIVE_HEAD, "member record")
    gossip_addr = r.text("gossip address text", width=1)
    client_addr = r.text("client address text", width=1)
    peer_addr = r.text("peer address text", width=1)
    rack = r.text("rack text", width=1)
    capacity = r.f64("member record capacity", finite=False)  # MemberMeta judges the value
    host = r.text("host text", width=1) if with_host else ""
    try:
        meta = MemberMeta(node, client_addr, peer_addr, rack, capacity, host)
        split_host_port(gossip_addr)
    except (MetadataError, ValueError) as exc:
        raise MembershipCodecError(f"bad member record: {exc}") from exc
    return incarnation, meta, gossip_addr


def _nonzero(node: int, what: str) -> int:
    if node == 0:
        raise MembershipCodecError(f"{what} node id is 0")
    return node


# Cached: the same alive message reaches a member many times while it spreads. Errors are not cached.
@functools.lru_cache(maxsize=4096)
def _decode_alive(body: bytes) -> Alive:
    r = Reader(body, "alive message", order=BIG)
    incarnation, meta, gossip_addr = _read_member(r, with_host=False)
    if r.left:  # a host follows the first format's fields
        r = Reader(body, "alive message", order=BIG)
        incarnation, meta, gossip_addr = _read_member(r, with_host=True)
    if r.left:
        raise MembershipCodecError("trailing bytes in alive message")
    return Alive(incarnation, meta, gossip_addr)


def _decode_body(kind: int, r: Reader) -> Message:
    size = r.left
    if kind == MessageType.PING:
        if size != _PING.size:
            raise MembershipCodecError(f"ping body is {size} bytes")
        seq, target = r.struct(_PING, "ping")
        return Ping(seq, _nonzero(target, "ping target"))
    if kind in (MessageType.ACK, MessageType.NACK):
        if size != _SEQ.size:
            raise MembershipCodecError(f"ack/nack body is {size} bytes")
        (seq,) = r.struct(_SEQ, "ack")
        return Ack(seq) if kind == MessageType.ACK else Nack(seq)
    if kind in (MessageType.SUSPECT, MessageType.DEAD):
        if size != _ACCUSE.size:
            raise MembershipCodecError(f"suspect/dead body is {size} bytes")
        incarnation, node, accuser = r.struct(_ACCUSE, "accusation")
        _nonzero(node, "accused")
        _nonzero(accuser, "accuser")
        return Suspect(incarnation, node, accuser) if kind == MessageType.SUSPECT else Dead(incarnation, node, accuser)
    if kind == MessageType.ALIVE:
        return _decode_alive(bytes(r.take(size, "alive message")))
    if kind == MessageType.INDIRECT_PING:
        if size < _INDIRECT.size:
            raise MembershipCodecError("indirect ping truncated")
        seq, target, flags = r.struct(_INDIRECT, "indirect ping")
        if flags & ~_WANT_NACK:
            raise MembershipCodecError(f"unknown indirect ping flags {flags:#x}")
        target_addr = r.text("indirect ping target address text", width=1)
        if r.left:
            raise MembershipCodecError("trailing bytes in indirect ping")
        try:
            split_host_port(target_addr)
        except ValueError as exc:
            raise MembershipCodecError(f"bad indirect ping target: {exc}") from exc
        return IndirectPing(seq, _nonzero(target, "indirect ping target"), target_addr, bool(flags & _WANT_NACK))
    raise MembershipCodecError(f"unknown message type {kind}")


def _read_header(r: Reader, magic: int) -> tuple[int, int]:
    if r.left < _HEADER.size:
        raise MembershipCodecError(f"{r.what} shorter than its header ({r.left} bytes)")
    found_magic, version, tag, sender = r.struct(_HEADER, "header")
    if found_magic != magic:
        raise MembershipCodecError(f"not a {r.what} (magic {found_magic:#x})")
    if version != VERSION:
        raise MembershipCodecError(f"{r.what} version {version} is not {VERSION}")
    return tag, _nonzero(sender, "sender")


def decode_packet(data: bytes | bytearray | memoryview) -> Packet:
    """Decode a whole packet or raise :class:`MembershipCodecError`; a packet is accepted or dropped as a unit."""
    r = Reader(data, "packet", order=BIG)
    try:
        tag, sender = _read_header(r, _PACKET_MAGIC)
        (sender_members,) = r.struct(_MEMBERS, "packet header")
        messages: list[Message] = []
        while r.left:
            kind, length = r.struct(_FRAME, "frame header")
            messages.append(_decode_body(kind, r.sub(length, "frame body")))
    except BinaryDecodeError as exc:
        raise MembershipCodecError(str(exc)) from exc
    if not messages:
        raise MembershipCodecError("packet has no messages")
    return Packet(tag, sender, sender_members, tuple(messages))


def decode_push_pull(data: bytes | bytearray | memoryview) -> PushPull:
    """Decode a push-pull state or raise :class:`MembershipCodecError`."""
    r = Reader(data, "push-pull state", order=BIG)
    try:
        tag, sender = _read_header(r, _STATE_MAGIC)
        flags, count = r.struct(_STATE_HEAD, "push-pull state header")
        if flags & ~(_JOIN | _WITH_HOSTS):
            raise MembershipCodecError(f"unknown push-pull flags {flags:#x}")
        if count * _SMALLEST_ENTRY > r.left:
            raise MembershipCodecError(f"push-pull state claims {count} members in {r.left} bytes")
        entries: list[StateEntry] = []
        for _ in range(count):
            raw_state = r.u8("member state")
            try:
                state = MemberState(raw_state)
            except ValueError as exc:
                raise MembershipCodecError(f"unknown member state {raw_state}") from exc
            incarnation, meta, gossip_addr = _read_member(r, bool(flags & _WITH_HOSTS))
            entries.append(StateEntry(incarnation, meta, gossip_addr, state))
        if r.left:
            raise MembershipCodecError("trailing bytes after push-pull state")
    except BinaryDecodeError as exc:
        raise MembershipCodecError(str(exc)) from exc
    return PushPull(tag, sender, bool(flags & _JOIN), tuple(entries))
