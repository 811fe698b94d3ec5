"""The peer transport's frames: their layouts, types and counters, and the checks a received frame must pass
(see :mod:`multiraft.node.peer.transport` for the protocol)."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from multiraft.logging import get_logger
from multiraft.node.threads import ThreadShared
from multiraft.raft import DecodeError, Message, MessageType, decode_message, encode_message_buffers

__all__ = [
    "PROTOCOL_VERSION",
    "MAX_TERM_OR_INDEX",
    "FrameType",
    "TransportStats",
    "RaftDelivery",
    "RequestHandler",
    "BadFrameError",
    "coalescible",
    "check_ranges",
    "Frame",
    "LENGTH",
    "FRAME_HEAD",
    "HELLO",
    "GROUP_MESSAGE",
    "CALL_HEAD",
    "HEARTBEAT",
    "HEARTBEAT_RESPONSE",
    "HEARTBEAT_QUIESCE",
    "write_response",
    "heartbeat_frames",
    "batch_frames",
    "frame_bytes",
    "count_sent",
    "decode_raft",
    "decode_heartbeats",
]

log = get_logger(__name__)

PROTOCOL_VERSION = 2  # 2: HEARTBEATS frames
LENGTH = struct.Struct("<I")
FRAME_HEAD = struct.Struct("<IB")
HELLO = struct.Struct("<HQH")
GROUP_MESSAGE = struct.Struct("<II")
CALL_HEAD = struct.Struct("<QB")
HEARTBEAT = struct.Struct("<IBQQ")  # group id, flags, term, commit
HEARTBEAT_RESPONSE = 1
HEARTBEAT_QUIESCE = 2
MAX_TERM_OR_INDEX = 2**63 - 2
"""The largest term or index a peer may send: ``+ 1`` of it still fits the signed 64-bit fields of storage and
the tracker's ``1 << 63`` sentinel, so a forged term cannot leave a group unable to hold an election."""

Frame = tuple[int, list[bytes | memoryview], int, int]  # (frame type, parts, body size, messages in it)


class FrameType:
    HELLO = 1
    RAFT = 2
    REQUEST = 3
    RESPONSE = 4
    HEARTBEATS = 5


RaftDelivery = Callable[[int, list[tuple[int, Message]]], None]
"""(from node, [(group id, message)]) for each RAFT frame received."""

RequestHandler = Callable[[int, int, bytes], Awaitable[tuple[int, bytes]]]
"""(from node, kind, body) -> (status, body) for each REQUEST frame."""


@dataclass
class TransportStats(ThreadShared):
    """The transport's counters. Shared: the loop and the scheduler thread's direct writes (under a link's
    lock) both add to them; they are read for diagnostics only."""

    frames_out: int = 0
    frames_in: int = 0
    bytes_out: int = 0
    bytes_in: int = 0
    messages_out: int = 0
    messages_in: int = 0
    dropped_messages: int = 0
    oversized_messages: int = 0  # dropped because they cannot fit in a frame (also in dropped_messages)
    heartbeat_frames_out: int = 0  # HEARTBEATS frames (also in frames_out)
    heartbeats_out: int = 0  # heartbeats and responses sent in them (also in messages_out)
    heartbeat_frames_in: int = 0
    heartbeats_in: int = 0
    bad_frames: int = 0
    forged_messages: int = 0  # Raft messages whose sender is not the connection's node, dropped
    stranger_messages: int = 0  # Raft messages (heartbeats included) from a node not known as a peer, dropped
    connects: int = 0
    refused_connections: int = 0  # closed on arrival: the listener held max_peer_connections
    refused_requests: int = 0  # answered busy: the connection had max_peer_requests_per_connection in service
    refused_certificates: int = 0  # TLS: a failed handshake, or a HELLO naming a node its certificate does not
    direct_frames_out: int = 0  # written by another thread (the scheduler's) straight on the socket (in frames_out)
    handed_frames_out: int = 0  # posted by another thread but handed to the loop to write (plain ones, TLS, busy)


def coalescible(message: Message) -> bool:
    """A plain heartbeat or response: it carries no more than term, commit and the quiesce flag (a ReadIndex
    context must not wait, and nothing else would survive the compact encoding)."""
    kind = message.type
    return (
        (kind is MessageType.HEARTBEAT or kind is MessageType.HEARTBEAT_RESP)
        and not message.context
        and not message.index
        and not message.log_term
        and not message.entries
        and message.snapshot is None
        and not message.reject
        and not message.reject_hint
        and not message.leader_transfer
    )


def check_ranges(message: Message) -> None:
    """Refuse a message carrying a term or index that no group can ever reach (see ``MAX_TERM_OR_INDEX``)."""
    fields = [message.term, message.log_term, message.index, message.commit, message.reject_hint]
    for entry in message.entries:
        fields += (entry.index, entry.term)
    if message.snapshot is not None:
        fields += (message.snapshot.meta.index, message.snapshot.meta.term)
    if max(fields) > MAX_TERM_OR_INDEX:
        raise BadFrameError(
            f"a {message.type.name} from {message.sender} carries a term or index above {MAX_TERM_OR_INDEX}"
        )


class BadFrameError(Exception):
    """A received frame is malformed: its connection is closed."""


def write_response(writer: asyncio.StreamWriter, request: bytes, status: int, answer: bytes) -> None:
    """Answer the REQUEST frame body ``request`` on ``writer`` (unless it is closing or the request is short)."""
    if len(request) < CALL_HEAD.size or writer.is_closing():
        return
    call_id, _ = CALL_HEAD.unpack_from(request)
    head = CALL_HEAD.pack(call_id, status)
    writer.writelines([FRAME_HEAD.pack(1 + len(head) + len(answer), FrameType.RESPONSE), head, answer])


# ------------------------------------------------------------------------------ encoding and decoding


def batch_frames(
    messages: Sequence[tuple[int, Message]], max_frame: int
) -> tuple[list[Frame], dict[int, Message], list[tuple[int, Message, int]]]:
    """One peer's (group id, message) pairs as RAFT frames of at most ``max_frame`` bytes, with the heartbeat
    responses among them in HEARTBEATS frames; returns (frames, plain heartbeats to hold by group, messages too
    large for a frame with their size)."""
    limit = max_frame - 1  # the frame type byte counts against the limit
    frames: list[Frame] = []
    parts: list[bytes | memoryview] = []
    size = count = 0
    held: dict[int, Message] = {}
    responses: list[tuple[int, Message]] = []
    oversized: list[tuple[int, Message, int]] = []
    for group_id, message in messages:
        if coalescible(message):
            if message.type is MessageType.HEARTBEAT_RESP:
                responses.append((group_id, message))
            else:
                held[group_id] = message  # a newer heartbeat of the group supersedes the one held
            continue
        buffers = encode_message_buffers(message)
        length = sum([len(b) for b in buffers])
        item = GROUP_MESSAGE.size + length
        if item > limit:
            oversized.append((group_id, message, item))
            continue
        if size + item > limit:
            frames.append((FrameType.RAFT, parts, size, count))
            parts, size, count = [], 0, 0
        parts.append(GROUP_MESSAGE.pack(group_id, length))
        parts.extend(buffers)
        size += item
        count += 1
    if count:
        frames.append((FrameType.RAFT, parts, size, count))
    if responses:
        frames += heartbeat_frames(responses, max_frame)
    return frames, held, oversized


def frame_bytes(frames: list[Frame]) -> tuple[list[bytes | memoryview], int]:
    """The buffers to write for ``frames``, heads included, and their total size."""
    out: list[bytes | memoryview] = []
    total = 0
    for frame_type, parts, size, _ in frames:
        out.append(FRAME_HEAD.pack(size + 1, frame_type))
        out.extend(parts)
        total += size + FRAME_HEAD.size
    return out, total


def count_sent(stats: TransportStats, frames: list[Frame]) -> None:
    for frame_type, _, size, count in frames:
        stats.bytes_out += size + FRAME_HEAD.size
        stats.messages_out += count
        if frame_type == FrameType.HEARTBEATS:
            stats.heartbeat_frames_out += 1
            stats.heartbeats_out += count
    stats.frames_out += len(frames)


def heartbeat_frames(messages: list[tuple[int, Message]], max_frame: int) -> list[Frame]:
    """Plain heartbeats (or their responses) as HEARTBEATS frames of at most ``max_frame`` bytes."""
    body = bytearray(len(messages) * HEARTBEAT.size)
    pack = HEARTBEAT.pack_into
    offset = 0
    for group_id, message in messages:
        flags = (HEARTBEAT_RESPONSE if message.type is MessageType.HEARTBEAT_RESP else 0) | (
            HEARTBEAT_QUIESCE if message.quiesce else 0
        )
        pack(body, offset, group_id, flags, message.term, message.commit)
        offset += HEARTBEAT.size
    view = memoryview(body)
    step = (max_frame - 1) // HEARTBEAT.size * HEARTBEAT.size
    frames: list[Frame] = []
    for at in range(0, len(view), step):
        chunk = view[at : at + step]
        frames.append((FrameType.HEARTBEATS, [chunk], len(chunk), len(chunk) // HEARTBEAT.size))
    return frames


def decode_raft(from_node: int, body: bytes, stats: TransportStats) -> list[tuple[int, Message]]:
    """A RAFT frame's messages, range-checked; those whose sender is not ``from_node`` are dropped and counted
    (``forged_messages``). Raises :class:`BadFrameError` for a frame that does not decode."""
    view = memoryview(body)
    messages: list[tuple[int, Message]] = []
    position = forged = 0
    try:
        while position < len(view):
            group_id, length = GROUP_MESSAGE.unpack_from(view, position)
            position += GROUP_MESSAGE.size
            if position + length > len(view):
                raise BadFrameError("message runs past the end of its frame")
            message = decode_message(view[position : position + length])
            position += length
            check_ranges(message)
            if message.sender != from_node:
                forged += 1
                log.debug(
                    "dropped a message whose sender is not its connection's node",
                    peer=from_node, sender=message.sender, group=group_id, type=message.type.name,
                )  # fmt: skip
                continue
            messages.append((group_id, message))
    except (DecodeError, struct.error) as exc:
        raise BadFrameError(f"undecodable message: {exc}") from exc
    stats.forged_messages += forged
    stats.messages_in += len(messages)
    return messages


def decode_heartbeats(node_id: int, from_node: int, body: bytes, stats: TransportStats) -> list[tuple[int, Message]]:
    """A HEARTBEATS frame as Raft messages to ``node_id``; raises :class:`BadFrameError` for a malformed one."""
    if len(body) % HEARTBEAT.size:
        raise BadFrameError(f"a heartbeat frame of {len(body)} bytes is not whole records")
    messages: list[tuple[int, Message]] = []
    for group_id, flags, term, commit in HEARTBEAT.iter_unpack(body):
        if flags & ~(HEARTBEAT_RESPONSE | HEARTBEAT_QUIESCE):
            raise BadFrameError(f"unknown heartbeat flags {flags:#x}")
        if term > MAX_TERM_OR_INDEX or commit > MAX_TERM_OR_INDEX:
            raise BadFrameError(f"a heartbeat's term {term} or commit {commit} is above {MAX_TERM_OR_INDEX}")
        kind = MessageType.HEARTBEAT_RESP if flags & HEARTBEAT_RESPONSE else MessageType.HEARTBEAT
        quiesce = bool(flags & HEARTBEAT_QUIESCE)
        messages.append(
            (group_id, Message(type=kind, to=node_id, sender=from_node, term=term, commit=commit, quiesce=quiesce))
        )
    stats.heartbeat_frames_in += 1
    stats.heartbeats_in += len(messages)
    stats.messages_in += len(messages)
    return messages
