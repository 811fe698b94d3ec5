"""Encoding of the replicated group records, stored as CONTROL entries of the group's ``__consumer_offsets``
partition next to its offset commits (:mod:`multiraft.node.replicas.offsets`).

A record is one compact JSON object with the format tag ``"v": "groups/1"`` (offset commits carry
``"offsets/1"``, so one partition's state machine tells them apart) and a type ``t``::

    {"v":"groups/1","t":"group","group":"billing","generation":7,"state":"Stable","protocol_type":"consumer",
     "protocol":"cooperative-sticky","leader":"c-1","ts":1700000000000,"members":[{"id":"c-1",
     "instance":null,"client":"c","host":"10.0.0.5","session_ms":45000,"rebalance_ms":300000,
     "protocols":["cooperative-sticky"],"topics":["orders"],"owned":[["orders",0]],"owned_gen":6,
     "rack":null,"user_data":"","assignment":[["orders",0]],"revoking":[],"delivered":[["orders",0]]}]}
    {"v":"groups/1","t":"tombstone","group":"billing"}

``user_data`` is base64. Partitions are sorted, so equal records give equal bytes. Decoding checks every
field's type and raises :class:`GroupRecordDecodeError` and nothing else.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable
from typing import Any, TypeVar

from ._model import (
    GroupMetadataRecord,
    GroupRecord,
    GroupState,
    GroupTombstone,
    MemberRecord,
    Subscription,
    TopicPartition,
)
from .errors import GroupRecordDecodeError, GroupRecordEncodeError

__all__ = ["GROUP_RECORD_FORMAT", "encode_group_record", "decode_group_record", "is_group_record"]

GROUP_RECORD_FORMAT = "groups/1"
_T = TypeVar("_T")


def encode_group_record(record: GroupRecord) -> bytes:
    if isinstance(record, GroupTombstone):
        document: dict[str, Any] = {"v": GROUP_RECORD_FORMAT, "t": "tombstone", "group": record.group_id}
    else:
        document = {
            "v": GROUP_RECORD_FORMAT,
            "t": "group",
            "group": record.group_id,
            "generation": record.generation,
            "state": record.state.value,
            "protocol_type": record.protocol_type,
            "protocol": record.protocol_name,
            "leader": record.leader_id,
            "ts": record.timestamp_ms,
            "members": [_encode_member(m) for m in record.members],
        }
    try:
        encoded = json.dumps(document, separators=(",", ":"), allow_nan=False).encode()
        decode_group_record(encoded)  # refuse here, at the proposer, what every replica would refuse
    except (ValueError, TypeError) as exc:
        raise GroupRecordEncodeError(f"cannot encode group record of {record.group_id!r}: {exc}") from exc
    return encoded


def _encode_member(m: MemberRecord) -> dict[str, Any]:
    s = m.subscription
    return {
        "id": m.member_id,
        "instance": m.group_instance_id,
        "client": m.client_id,
        "host": m.client_host,
        "session_ms": m.session_timeout_ms,
        "rebalance_ms": m.rebalance_timeout_ms,
        "protocols": list(m.protocols),
        "topics": list(s.topics),
        "owned": [list(tp) for tp in sorted(s.owned)],
        "owned_gen": s.owned_generation,
        "rack": s.rack,
        "user_data": base64.b64encode(s.user_data).decode(),
        "assignment": [list(tp) for tp in sorted(m.assignment)],
        "revoking": [list(tp) for tp in sorted(m.revoking)],
        "delivered": [list(tp) for tp in sorted(m.delivered)],
    }


def is_group_record(payload: bytes | memoryview) -> bool:
    """Cheap test whether a ``__consumer_offsets`` entry is a group record rather than an offset commit."""
    return f'"v":"{GROUP_RECORD_FORMAT}"'.encode() in bytes(payload[:64])


def decode_group_record(payload: bytes | memoryview) -> GroupRecord:
    try:
        document = json.loads(bytes(payload))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise GroupRecordDecodeError(f"undecodable group record: {exc}") from exc
    if not isinstance(document, dict) or document.get("v") != GROUP_RECORD_FORMAT:
        raise GroupRecordDecodeError("not a group record (format tag)")
    kind = document.get("t")
    group = _get(document, "group", str)
    if kind == "tombstone":
        return GroupTombstone(group)
    if kind != "group":
        raise GroupRecordDecodeError(f"unknown group record type {kind!r}")
    try:
        state = GroupState(_get(document, "state", str))
    except ValueError as exc:
        raise GroupRecordDecodeError(f"unknown group state: {exc}") from exc
    members = _get(document, "members", list)
    return GroupMetadataRecord(
        group,
        _int(document, "generation"),
        state,
        _optional_str(document, "protocol_type"),
        _optional_str(document, "protocol"),
        _get(document, "leader", str),
        tuple(_decode_member(m) for m in members),
        _int(document, "ts"),
    )


def _decode_member(m: object) -> MemberRecord:
    if not isinstance(m, dict):
        raise GroupRecordDecodeError("a member is not an object")
    try:
        user_data = base64.b64decode(_get(m, "user_data", str), validate=True)
    except binascii.Error as exc:
        raise GroupRecordDecodeError(f"user_data is not base64: {exc}") from exc
    subscription = Subscription(
        tuple(_strings(m, "topics")),
        _partitions(m, "owned"),
        _int(m, "owned_gen"),
        _optional_str(m, "rack"),
        user_data,
    )
    return MemberRecord(
        _get(m, "id", str),
        _optional_str(m, "instance"),
        _get(m, "client", str),
        _get(m, "host", str),
        _int(m, "session_ms"),
        _int(m, "rebalance_ms"),
        tuple(_strings(m, "protocols")),
        subscription,
        _partitions(m, "assignment"),
        _partitions(m, "revoking"),
        _partitions(m, "delivered"),
    )


def _get(document: dict[str, Any], key: str, kind: type[_T]) -> _T:
    value = document.get(key)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise GroupRecordDecodeError(f"{key!r} must be a {kind.__name__}, got {type(value).__name__}")
    return value


def _int(document: dict[str, Any], key: str) -> int:
    return _get(document, key, int)


def _optional_str(document: dict[str, Any], key: str) -> str | None:
    if key not in document:
        raise GroupRecordDecodeError(f"missing {key!r}")
    return None if document[key] is None else _get(document, key, str)


def _strings(document: dict[str, Any], key: str) -> list[str]:
    return _each(_get(document, key, list), key, lambda v: v if isinstance(v, str) else None)


def _partitions(document: dict[str, Any], key: str) -> frozenset[TopicPartition]:
    def one(v: object) -> TopicPartition | None:
        if not (isinstance(v, list) and len(v) == 2 and isinstance(v[0], str)):
            return None
        return (v[0], v[1]) if isinstance(v[1], int) and not isinstance(v[1], bool) else None

    return frozenset(_each(_get(document, key, list), key, one))


def _each(values: list[Any], key: str, convert: Callable[[Any], _T | None]) -> list[_T]:
    out: list[_T] = []
    for value in values:
        converted = convert(value)
        if converted is None:
            raise GroupRecordDecodeError(f"{key!r} holds a malformed item {value!r}")
        out.append(converted)
    return out
