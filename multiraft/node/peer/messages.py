"""The binary codec of node-to-node requests (the transport's REQUEST/RESPONSE frames).

Every request kind has a request and an answer type, defined in the node's vocabulary
(:mod:`multiraft.node.vocabulary`); this module holds only what is of the wire: the request kinds, the answer
statuses, and ``encode_*`` and ``decode_*``, exact inverses over the primitives of
:mod:`storage.binary`. Decoding checks every length against the bytes actually there before it
allocates, refuses trailing bytes and out-of-range values, and raises
:class:`~multiraft.errors.InvalidArgumentError` (naming the message and field) and nothing else, so a
malformed frame fails only its own request.

A controller request's command, already decided by the sender, travels in the controller's own encoding
(:func:`multiraft.controller.encode_command`). Errors travel as the client path's error: ``reason``,
``message`` and ``metadata`` of a :class:`~multiraft.errors.MultiraftError`, decoded by the same
:func:`~multiraft.errors.error_for_reason`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from enum import IntEnum
from typing import TypeVar

from multiraft import controller as ctl
from multiraft.errors import InvalidArgumentError, MultiraftError, UnavailableError, error_for_reason
from multiraft.node.vocabulary.capacity import NodeCapacity
from multiraft.node.vocabulary.catchup import SegmentChunkRequest
from multiraft.node.vocabulary.controller import (
    ControllerBody,
    ControllerOutcome,
    ControllerRequest,
    CreatePartitionsRequest,
    CreateTopicRequest,
    NodeStateRequest,
)
from multiraft.node.vocabulary.offsets import OffsetRow, OffsetsCommit, OffsetsFetch, OffsetsList, OffsetsRequest
from multiraft.node.vocabulary.status import LeaderAnnouncement, MoveReport, PartitionStatus
from storage import binary
from storage.binary import BinaryDecodeError, Reader, Writer

__all__ = [
    "RequestKind",
    "STATUS_OK",
    "STATUS_ERROR",
    "decode",
    "encode_error",
    "decode_error",
    "encode_controller_request",
    "decode_controller_request",
    "encode_controller_outcome",
    "decode_controller_outcome",
    "encode_group_ids",
    "decode_group_ids",
    "encode_partition_statuses",
    "decode_partition_statuses",
    "encode_leaders",
    "decode_leaders",
    "encode_offsets_request",
    "decode_offsets_request",
    "encode_offset_rows",
    "decode_offset_rows",
    "encode_strings",
    "decode_strings",
    "encode_moves",
    "decode_moves",
    "encode_capacity",
    "decode_capacity",
    "encode_chunk_request",
    "decode_chunk_request",
]


class RequestKind(IntEnum):
    """The ``kind`` of a REQUEST frame."""

    CONTROLLER = 1
    PARTITION_STATUS = 2
    LEADERS = 3
    OFFSETS = 4
    GROUPS = 7  # multiraft.node.peer.consumer_group_messages: the consumer-group coordinator
    MOVES = 5
    CAPACITY = 6  # multiraft.node.cluster.capacity: what the node can still store
    SEGMENT_CHUNK = 20


STATUS_OK = 0
STATUS_ERROR = 1

T = TypeVar("T")


def decode(data: bytes | memoryview, what: str, read: Callable[[Reader], T]) -> T:
    """``read`` the whole of ``data``; malformed bytes fail only their own request, as invalid arguments."""
    try:
        return binary.decode(data, what, read)
    except BinaryDecodeError as exc:
        raise InvalidArgumentError(str(exc), field=f"{exc.what}.{exc.field}") from exc


# ---------------------------------------------------------------------------------------------------- errors


def encode_error(error: MultiraftError) -> bytes:
    writer = Writer()
    writer.text(error.reason)
    writer.text(error.message)
    writer.mapping(error.metadata)
    return writer.bytes()


def decode_error(body: bytes, *, source: str = "a peer") -> MultiraftError:
    """The error a peer answered with; an undecodable answer becomes :class:`UnavailableError`."""
    try:
        return decode(
            body, "error", lambda r: error_for_reason(r.text("reason"), r.text("message"), r.mapping("metadata"))
        )
    except InvalidArgumentError:
        return UnavailableError(f"{source} failed: {body[:200]!r}")


# ---------------------------------------------------------------------------------------------- controller


_COMMAND, _CREATE_TOPIC, _NODE_STATE = 0, 1, 2
_CREATE_PARTITIONS = 3  # adding partitions (issue 25)
_NODE_STATES = {state.value: state for state in ctl.NodeState}


def encode_controller_request(request: ControllerRequest) -> bytes:
    writer = Writer()
    writer.u8(1 if request.forwarded else 0)
    body = request.body
    if isinstance(body, CreateTopicRequest):
        writer.u8(_CREATE_TOPIC)
        writer.text(body.name)
        writer.i64(body.partitions)
        writer.i64(body.replication_factor)
        writer.mapping(body.configs)
        writer.u8(1 if body.internal else 0)
    elif isinstance(body, NodeStateRequest):
        writer.u8(_NODE_STATE)
        writer.i64(body.node_id)
        writer.text(ctl.NodeState(body.state).value)
        writer.u8(1 if body.force else 0)
    elif isinstance(body, CreatePartitionsRequest):
        writer.u8(_CREATE_PARTITIONS)
        writer.text(body.name)
        writer.i64(body.total)
    else:
        writer.u8(_COMMAND)
        writer.raw(ctl.encode_command(body))
    writer.i64(request.origin)
    writer.text(request.principal)
    return writer.bytes()


def decode_controller_request(data: bytes) -> ControllerRequest:
    def read(r: Reader) -> ControllerRequest:
        forwarded = r.flag("forwarded")
        tag = r.u8("type")
        body: ControllerBody
        if tag == _CREATE_TOPIC:
            body = CreateTopicRequest(
                r.text("name"),
                r.i64("partitions"),
                r.i64("replication_factor"),
                r.mapping("configs"),
                r.flag("internal"),
            )
        elif tag == _COMMAND:
            raw = r.raw("command")
            try:
                body = ctl.decode_command(raw)
            except ctl.CommandDecodeError as exc:
                raise r.fail("command", str(exc)) from exc
        elif tag == _NODE_STATE:
            node_id, state = r.id("node_id"), r.text("state")
            if state not in _NODE_STATES:
                raise r.fail("state", f"is {state[:32]!r}, not one of {sorted(_NODE_STATES)}")
            body = NodeStateRequest(node_id, _NODE_STATES[state], r.flag("force"))
        elif tag == _CREATE_PARTITIONS:
            body = CreatePartitionsRequest(r.text("name"), r.i64("total"))
        else:
            raise r.fail("type", f"is {tag}, not a known request type")
        return ControllerRequest(body, forwarded, r.id("origin"), r.text("principal"))

    return decode(data, "controller request", read)


def encode_controller_outcome(outcome: ControllerOutcome) -> bytes:
    writer = Writer()
    writer.text(outcome.topic)
    writer.i64(outcome.node_id)
    writer.i64(outcome.producer_ids[0])
    writer.i64(outcome.producer_ids[1])
    writer.i64(outcome.group_id)
    return writer.bytes()


def decode_controller_outcome(data: bytes) -> ControllerOutcome:
    return decode(
        data,
        "controller outcome",
        lambda r: ControllerOutcome(r.text("topic"), r.id("node_id"), (r.id("first"), r.id("count")), r.id("group_id")),
    )


# ----------------------------------------------------------------------------------------- partition status


def encode_group_ids(group_ids: Sequence[int]) -> bytes:
    writer = Writer()
    writer.ints(group_ids)
    return writer.bytes()


def decode_group_ids(data: bytes) -> tuple[int, ...]:
    def read(r: Reader) -> tuple[int, ...]:
        ids = r.ints("group_ids")
        if any(g < 0 for g in ids):
            raise r.fail("group_ids", "must be >= 0")
        return ids

    return decode(data, "partition status request", read)


def _int_map(writer: Writer, values: dict[int, int]) -> None:
    writer.ints([x for pair in values.items() for x in pair])


def _read_int_map(r: Reader, field: str) -> dict[int, int]:
    flat = r.ints(field)
    if len(flat) % 2:
        raise r.fail(field, "has an odd number of values")
    return dict(zip(flat[::2], flat[1::2], strict=True))


def encode_partition_statuses(statuses: Sequence[PartitionStatus]) -> bytes:
    writer = Writer()
    writer.u32(len(statuses))
    for s in statuses:
        for value in (s.group_id, s.leader, s.term, s.high_watermark, s.log_start_offset, s.size_bytes, s.entries):
            writer.i64(value)
        writer.ints(s.in_sync_replicas)
        _int_map(writer, s.lag)
        writer.ints(s.acked)
        writer.ints([x for peer, (copied, total) in s.copies.items() for x in (peer, copied, total)])
    return writer.bytes()


def decode_partition_statuses(data: bytes) -> list[PartitionStatus]:
    def one(r: Reader) -> PartitionStatus:
        group_id, leader, term, hw, start, size, entries = (
            r.id(name) for name in ("group_id", "leader", "term", "hw", "log_start", "bytes", "entries")
        )
        isr, lag, acked = r.ints("isr"), _read_int_map(r, "lag"), r.ints("acked")
        flat = r.ints("copies")
        if len(flat) % 3:
            raise r.fail("copies", "is not a list of triples")
        copies = {flat[i]: (flat[i + 1], flat[i + 2]) for i in range(0, len(flat), 3)}
        return PartitionStatus(group_id, leader, term, hw, start, isr, lag, acked, copies, size, entries)

    return decode(data, "partition status", lambda r: r.items("statuses", 56, lambda: one(r)))


# ---------------------------------------------------------------------------------------------------- leaders


def encode_leaders(leaders: Sequence[LeaderAnnouncement]) -> bytes:
    writer = Writer()
    writer.ints([x for a in leaders for x in (a.group_id, a.leader, a.term)])
    return writer.bytes()


def decode_leaders(data: bytes) -> list[LeaderAnnouncement]:
    def read(r: Reader) -> list[LeaderAnnouncement]:
        flat = r.ints("leaders")
        if len(flat) % 3 or any(x < 0 for x in flat):
            raise r.fail("leaders", "is not a list of non-negative (group, leader, term) triples")
        return [LeaderAnnouncement(*flat[i : i + 3]) for i in range(0, len(flat), 3)]

    return decode(data, "leaders", read)


# ---------------------------------------------------------------------------------------------------- offsets


_COMMIT, _FETCH, _LIST = 1, 2, 3


def _write_rows(writer: Writer, rows: Sequence[OffsetRow]) -> None:
    writer.u32(len(rows))
    for row in rows:
        writer.text(row.topic)
        writer.i64(row.partition)
        writer.i64(row.offset)
        writer.text(row.metadata)
        writer.i64(row.commit_time_ms)


def _read_rows(r: Reader) -> tuple[OffsetRow, ...]:
    return tuple(
        r.items(
            "rows",
            32,
            lambda: OffsetRow(r.text("topic"), r.id("partition"), r.i64("offset"), r.text("metadata"), r.i64("time")),
        )
    )


def encode_offsets_request(request: OffsetsRequest) -> bytes:
    writer = Writer()
    writer.i64(request.group_id)
    operation = request.operation
    if isinstance(operation, OffsetsCommit):
        writer.u8(_COMMIT)
        writer.text(operation.group)
        _write_rows(writer, operation.rows)
        writer.text(operation.member_id)
        writer.i64(operation.generation)
        writer.u8(0 if operation.group_instance_id is None else 1)
        writer.text(operation.group_instance_id or "")
    elif isinstance(operation, OffsetsFetch):
        writer.u8(_FETCH)
        writer.text(operation.group)
        writer.u8(0 if operation.partitions is None else 1)
        _write_rows(writer, [OffsetRow(t, p, 0) for t, p in operation.partitions or ()])
    else:
        writer.u8(_LIST)
    return writer.bytes()


def decode_offsets_request(data: bytes) -> OffsetsRequest:
    def read(r: Reader) -> OffsetsRequest:
        group_id = r.id("group_id")
        tag = r.u8("operation")
        operation: OffsetsCommit | OffsetsFetch | OffsetsList
        if tag == _COMMIT:
            group, rows = r.text("group"), _read_rows(r)
            member_id, generation, static = r.text("member_id"), r.i64("generation"), r.flag("static")
            instance = r.text("group_instance_id")
            if not static and instance:
                raise r.fail("group_instance_id", "is given for a dynamic member")
            operation = OffsetsCommit(group, rows, member_id, generation, instance if static else None)
        elif tag == _FETCH:
            group, some = r.text("group"), r.flag("some")
            rows = _read_rows(r)
            if rows and not some:
                raise r.fail("rows", "are given for a fetch of every partition")
            operation = OffsetsFetch(group, tuple((row.topic, row.partition) for row in rows) if some else None)
        elif tag == _LIST:
            operation = OffsetsList()
        else:
            raise r.fail("operation", f"is {tag}, not a known operation")
        return OffsetsRequest(group_id, operation)

    return decode(data, "offsets request", read)


def encode_offset_rows(rows: Sequence[OffsetRow]) -> bytes:
    writer = Writer()
    _write_rows(writer, rows)
    return writer.bytes()


def decode_offset_rows(data: bytes) -> tuple[OffsetRow, ...]:
    return decode(data, "offset rows", _read_rows)


def encode_strings(values: Sequence[str]) -> bytes:
    writer = Writer()
    writer.texts(values)
    return writer.bytes()


def decode_strings(data: bytes) -> tuple[str, ...]:
    return decode(data, "strings", lambda r: r.texts("values"))


# ------------------------------------------------------------------------------------------------------ moves


def encode_moves(moves: Sequence[MoveReport]) -> bytes:
    writer = Writer()
    writer.u32(len(moves))
    for m in moves:
        writer.text(m.topic)
        for value in (m.partition, m.group_id, m.from_node, m.to_node):
            writer.i64(value)
        writer.text(m.phase)
        writer.i64(m.bytes_copied)
        writer.i64(m.bytes_total)
        writer.f64(m.eta_seconds)
    return writer.bytes()


def decode_moves(data: bytes) -> list[MoveReport]:
    def one(r: Reader) -> MoveReport:
        return MoveReport(
            r.text("topic"),
            r.id("partition"),
            r.id("group_id"),
            r.id("from_node"),
            r.id("to_node"),
            r.text("phase"),
            r.id("bytes_copied"),
            r.id("bytes_total"),
            r.f64("eta_seconds"),
        )

    return decode(data, "moves", lambda r: r.items("moves", 60, lambda: one(r)))


# --------------------------------------------------------------------------------------------------- capacity


def encode_capacity(capacity: NodeCapacity) -> bytes:
    writer = Writer()
    for value in (
        capacity.node_id,
        capacity.assigned,
        capacity.free_segments,
        capacity.reserved_segments,
        capacity.disk_free_bytes,
        capacity.map_free_bytes,
    ):
        writer.i64(value)
    writer.text(capacity.short)
    writer.ints(capacity.unstorable)
    return writer.bytes()


def decode_capacity(data: bytes) -> NodeCapacity:
    def read(r: Reader) -> NodeCapacity:
        return NodeCapacity(
            r.id("node_id"),
            r.id("assigned"),
            r.id("free_segments"),
            r.id("reserved_segments"),
            r.id("disk_free_bytes"),
            r.id("map_free_bytes"),
            r.text("short"),
            r.ints("unstorable"),
        )

    return decode(data, "capacity", read)


# ------------------------------------------------------------------------------------------ segment chunks


def encode_chunk_request(request: SegmentChunkRequest) -> bytes:
    writer = Writer()
    for value in (request.group_id, request.base_index, request.last_index, request.crc, request.offset):
        writer.i64(value)
    for value in (request.length, request.copied, request.total):
        writer.i64(value)
    return writer.bytes()


def decode_chunk_request(data: bytes) -> SegmentChunkRequest:
    names = ("group_id", "base_index", "last_index", "crc", "offset", "length", "copied", "total")
    return decode(data, "segment chunk request", lambda r: SegmentChunkRequest(*(r.id(n) for n in names)))
