"""Operations for the consumer-group coordinator, and what it answers.

Any node takes a client's group call and forwards it to the coordinator, the leader of the group's
``__consumer_offsets`` partition (:mod:`multiraft.node.services.consumer_groups`). The requests and replies
inside are the coordinator's own (:mod:`multiraft.consumer_groups`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

from multiraft import consumer_groups as g

__all__ = [
    "GroupJoin",
    "GroupSync",
    "GroupHeartbeat",
    "GroupLeave",
    "GroupDescribe",
    "GroupDelete",
    "GroupsList",
    "GroupOperation",
    "GroupsRequest",
    "GroupListingRow",
    "GroupsAnswer",
]


@dataclass(frozen=True, slots=True)
class GroupJoin:
    group: str
    request: g.JoinRequest


@dataclass(frozen=True, slots=True)
class GroupSync:
    group: str
    request: g.SyncRequest


@dataclass(frozen=True, slots=True)
class GroupHeartbeat:
    group: str
    request: g.HeartbeatRequest


@dataclass(frozen=True, slots=True)
class GroupLeave:
    group: str
    request: g.LeaveRequest


@dataclass(frozen=True, slots=True)
class GroupDescribe:
    group: str


@dataclass(frozen=True, slots=True)
class GroupDelete:
    group: str


@dataclass(frozen=True, slots=True)
class GroupsList:
    """Every group of the partition with committed offsets or a group record."""


GroupOperation: TypeAlias = (
    GroupJoin | GroupSync | GroupHeartbeat | GroupLeave | GroupDescribe | GroupDelete | GroupsList
)


@dataclass(frozen=True, slots=True)
class GroupsRequest:
    """A group operation for the coordinator hosted with offsets Raft group ``group_id``."""

    group_id: int
    operation: GroupOperation


@dataclass(frozen=True, slots=True)
class GroupListingRow:
    group: str
    state: str
    protocol_type: str
    members: int


# A reply without error (join, sync), a description, listings, or None (heartbeat, leave, delete).
GroupsAnswer: TypeAlias = g.JoinReply | g.SyncReply | g.GroupMetadataRecord | tuple[GroupListingRow, ...] | None
