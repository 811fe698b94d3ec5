"""The binary codec of the consumer-group coordinator's node-to-node messages (``RequestKind.GROUPS``).

Any node takes a client's group call and forwards it to the coordinator, the leader of the group's
``__consumer_offsets`` partition (:mod:`multiraft.node.services.consumer_groups`). The operations and answers
are the node's vocabulary (:mod:`multiraft.node.vocabulary.consumer_groups`) over the coordinator's own values
(:mod:`multiraft.consumer_groups`); a description travels as the replicated record's encoding. Decoding checks
every length before it allocates and raises :class:`~multiraft.errors.InvalidArgumentError` and nothing else,
as in :mod:`multiraft.node.peer.messages`.
"""

from __future__ import annotations

from multiraft import consumer_groups as g
from multiraft.node.peer.messages import decode
from multiraft.node.vocabulary.consumer_groups import (
    GroupDelete,
    GroupDescribe,
    GroupHeartbeat,
    GroupJoin,
    GroupLeave,
    GroupListingRow,
    GroupOperation,
    GroupsAnswer,
    GroupsList,
    GroupsRequest,
    GroupSync,
)
from storage.binary import Reader, Writer

__all__ = [
    "encode_groups_request",
    "decode_groups_request",
    "encode_groups_answer",
    "decode_groups_answer",
]


_JOIN, _SYNC, _HEARTBEAT, _LEAVE, _DESCRIBE, _DELETE, _LIST = range(1, 8)
_TAGS: dict[type, int] = {
    GroupJoin: _JOIN,
    GroupSync: _SYNC,
    GroupHeartbeat: _HEARTBEAT,
    GroupLeave: _LEAVE,
    GroupDescribe: _DESCRIBE,
    GroupDelete: _DELETE,
    GroupsList: _LIST,
}

# ------------------------------------------------------------------------------------------------ primitives


def _opt(w: Writer, value: str | None) -> None:
    w.u8(0 if value is None else 1)
    w.text(value or "")


def _read_opt(r: Reader, field: str) -> str | None:
    some = r.flag(field)
    value = r.text(field)
    if not some and value:
        raise r.fail(field, "has a value but is marked absent")
    return value if some else None


def _partitions(w: Writer, partitions: frozenset[g.TopicPartition]) -> None:
    ordered = sorted(partitions)
    w.u32(len(ordered))
    for topic, partition in ordered:
        w.text(topic)
        w.i64(partition)


def _read_partitions(r: Reader, field: str) -> frozenset[g.TopicPartition]:
    return frozenset(r.items(field, 12, lambda: (r.text(f"{field}.topic"), r.id(f"{field}.partition"))))


def _subscription(w: Writer, s: g.Subscription) -> None:
    w.texts(s.topics)
    _partitions(w, s.owned)
    w.i64(s.owned_generation)
    _opt(w, s.rack)
    w.raw(s.user_data)


def _read_subscription(r: Reader) -> g.Subscription:
    return g.Subscription(
        r.texts("topics"), _read_partitions(r, "owned"), r.i64("owned_generation"), _read_opt(r, "rack"), r.raw("ud")
    )


# --------------------------------------------------------------------------------------------------- requests


def encode_groups_request(request: GroupsRequest) -> bytes:
    w = Writer()
    w.i64(request.group_id)
    op = request.operation
    w.u8(_TAGS[type(op)])
    if isinstance(op, GroupsList):
        return w.bytes()
    w.text(op.group)
    if isinstance(op, GroupJoin):
        j = op.request
        w.text(j.member_id)
        w.i64(j.session_timeout_ms)
        w.i64(j.rebalance_timeout_ms)
        w.texts(j.protocols)
        _subscription(w, j.subscription)
        _opt(w, j.group_instance_id)
        w.text(j.protocol_type)
        w.text(j.client_id)
        w.text(j.client_host)
    elif isinstance(op, GroupSync):
        s = op.request
        w.text(s.member_id)
        w.i64(s.generation)
        w.u32(len(s.assignments))
        for member_id, partitions in s.assignments:
            w.text(member_id)
            _partitions(w, partitions)
        _opt(w, s.group_instance_id)
        _opt(w, s.protocol_type)
        _opt(w, s.protocol_name)
    elif isinstance(op, GroupHeartbeat):
        w.text(op.request.member_id)
        w.i64(op.request.generation)
        _opt(w, op.request.group_instance_id)
    elif isinstance(op, GroupLeave):
        w.text(op.request.member_id)
        _opt(w, op.request.group_instance_id)
    return w.bytes()


def decode_groups_request(data: bytes) -> GroupsRequest:
    def read(r: Reader) -> GroupsRequest:
        group_id, tag = r.id("group_id"), r.u8("operation")
        if tag == _LIST:
            return GroupsRequest(group_id, GroupsList())
        if tag not in _TAGS.values():
            raise r.fail("operation", f"is {tag}, not a known operation")
        group = r.text("group")
        op: GroupOperation
        if tag == _JOIN:
            join = g.JoinRequest(
                r.text("member_id"),
                r.i64("session_timeout_ms"),
                r.i64("rebalance_timeout_ms"),
                r.texts("protocols"),
                _read_subscription(r),
                _read_opt(r, "group_instance_id"),
                r.text("protocol_type"),
                r.text("client_id"),
                r.text("client_host"),
            )
            op = GroupJoin(group, join)
        elif tag == _SYNC:
            member_id, generation = r.text("member_id"), r.i64("generation")
            assignments = r.items("assignments", 8, lambda: (r.text("member"), _read_partitions(r, "assignment")))
            sync = g.SyncRequest(
                member_id,
                generation,
                tuple(assignments),
                _read_opt(r, "group_instance_id"),
                _read_opt(r, "protocol_type"),
                _read_opt(r, "protocol_name"),
            )
            op = GroupSync(group, sync)
        elif tag == _HEARTBEAT:
            beat = g.HeartbeatRequest(r.text("member_id"), r.i64("generation"), _read_opt(r, "group_instance_id"))
            op = GroupHeartbeat(group, beat)
        elif tag == _LEAVE:
            op = GroupLeave(group, g.LeaveRequest(r.text("member_id"), _read_opt(r, "group_instance_id")))
        elif tag == _DESCRIBE:
            op = GroupDescribe(group)
        else:
            op = GroupDelete(group)
        return GroupsRequest(group_id, op)

    return decode(data, "groups request", read)


# ---------------------------------------------------------------------------------------------------- answers


def encode_groups_answer(operation: GroupOperation, answer: GroupsAnswer) -> bytes:
    """The coordinator's answer to ``operation`` (a reply without error, a description, listings or None)."""
    w = Writer()
    if isinstance(answer, g.JoinReply):
        w.text(answer.member_id)
        w.i64(answer.generation)
        _opt(w, answer.protocol_type)
        _opt(w, answer.protocol_name)
        w.text(answer.leader_id)
        w.u8(int(answer.skip_assignment))
        w.u32(len(answer.members))
        for m in answer.members:
            w.text(m.member_id)
            _opt(w, m.group_instance_id)
            _subscription(w, m.subscription)
    elif isinstance(answer, g.SyncReply):
        w.text(answer.member_id)
        w.i64(answer.generation)
        _opt(w, answer.protocol_type)
        _opt(w, answer.protocol_name)
        _partitions(w, answer.assignment)
    elif isinstance(answer, g.GroupMetadataRecord):
        w.raw(g.encode_group_record(answer))
    elif isinstance(answer, tuple):
        w.u32(len(answer))
        for row in answer:
            w.text(row.group)
            w.text(row.state)
            w.text(row.protocol_type)
            w.i64(row.members)
    return w.bytes()


def decode_groups_answer(operation: GroupOperation, data: bytes) -> GroupsAnswer:
    def read(r: Reader) -> GroupsAnswer:
        if isinstance(operation, GroupJoin):
            member_id, generation = r.text("member_id"), r.i64("generation")
            protocol_type, protocol_name = _read_opt(r, "protocol_type"), _read_opt(r, "protocol_name")
            leader_id, skip = r.text("leader_id"), r.flag("skip_assignment")
            members = r.items(
                "members",
                16,
                lambda: g.MemberSubscription(r.text("member"), _read_opt(r, "instance"), _read_subscription(r)),
            )
            return g.JoinReply(member_id, generation, protocol_type, protocol_name, leader_id, skip, tuple(members))
        if isinstance(operation, GroupSync):
            return g.SyncReply(
                r.text("member_id"),
                r.i64("generation"),
                _read_opt(r, "protocol_type"),
                _read_opt(r, "protocol_name"),
                _read_partitions(r, "assignment"),
            )
        if isinstance(operation, GroupDescribe):
            body = r.raw("description")
            try:
                record = g.decode_group_record(body)
            except g.GroupRecordDecodeError as exc:
                raise r.fail("description", str(exc)) from exc
            if not isinstance(record, g.GroupMetadataRecord):
                raise r.fail("description", "is a tombstone")
            return record
        if isinstance(operation, GroupsList):
            rows = r.items(
                "listings",
                20,
                lambda: GroupListingRow(r.text("group"), r.text("state"), r.text("protocol_type"), r.id("members")),
            )
            return tuple(rows)
        return None

    return decode(data, "groups answer", read)
