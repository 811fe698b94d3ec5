"""Values of the group coordinator: settings, requests, replies, the replicated records and the states.

Everything here is immutable. Times are milliseconds (``*_ms``) on whatever monotonic clock the driver uses;
the coordinator only compares them. A partition is a ``(topic, partition)`` tuple.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, fields
from typing import TypeAlias

from .errors import GroupCoordinatorError, GroupSettingsError

__all__ = [
    "TopicPartition",
    "GroupState",
    "GroupSettings",
    "Subscription",
    "MemberSubscription",
    "JoinRequest",
    "SyncRequest",
    "HeartbeatRequest",
    "LeaveRequest",
    "JoinReply",
    "SyncReply",
    "HeartbeatReply",
    "LeaveReply",
    "Reply",
    "MemberRecord",
    "GroupMetadataRecord",
    "GroupTombstone",
    "GroupRecord",
    "Outcome",
    "CONSUMER_PROTOCOL",
    "NO_GENERATION",
]

TopicPartition: TypeAlias = tuple[str, int]
CONSUMER_PROTOCOL = "consumer"  # Kafka's protocol type of consumer groups
NO_GENERATION = -1  # the generation of a commit from outside any generation (admin tools, manual assignment)


class GroupState(enum.Enum):
    """Kafka's group states; see docs/architecture.md for the transitions."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True)
class GroupSettings:
    """Coordinator-wide settings (Kafka's ``group.*`` broker settings). :meth:`validate` names a wrong field."""

    min_session_timeout_ms: int = field(
        default=6_000,
        metadata={"unit": "milliseconds", "doc": "Shortest session timeout a member may ask for."},
    )
    max_session_timeout_ms: int = field(
        default=1_800_000,
        metadata={"unit": "milliseconds", "doc": "Longest session timeout a member may ask for."},
    )
    initial_rebalance_delay_ms: int = field(
        default=3_000,
        metadata={
            "unit": "milliseconds",
            "doc": "An empty group that gets its first member waits this long (each new member restarts the "
            "wait, up to the rebalance timeout) for others before the first generation, so a starting fleet "
            "does not rebalance once per member.",
        },
    )
    max_group_size: int = field(
        default=2**31 - 1,
        metadata={"unit": "members", "doc": "Members a group may hold; a join beyond it is refused."},
    )

    def validate(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise GroupSettingsError(f.name, f"must be an int >= 0, got {value!r}")
        if self.min_session_timeout_ms > self.max_session_timeout_ms:
            raise GroupSettingsError("min_session_timeout_ms", "must not exceed max_session_timeout_ms")
        if self.max_group_size < 1:
            raise GroupSettingsError("max_group_size", "must be at least 1")


@dataclass(frozen=True)
class Subscription:
    """What a member reads and holds: Kafka's ConsumerProtocolSubscription, decoded.

    ``owned`` are the partitions the member holds now (cooperative protocols), or for the eager ``sticky``
    assignor those it held before it revoked them to join (Kafka carries them in that assignor's user data);
    ``owned_generation`` is the generation they were assigned in; ``rack`` the member's ``client.rack``.
    A member that claims fewer partitions than it was given has let the others go.
    """

    topics: tuple[str, ...] = ()
    owned: frozenset[TopicPartition] = frozenset()
    owned_generation: int = NO_GENERATION
    rack: str | None = None
    user_data: bytes = b""


@dataclass(frozen=True)
class MemberSubscription:
    """One member as the group leader sees it in its JoinGroup reply."""

    member_id: str
    group_instance_id: str | None
    subscription: Subscription


@dataclass(frozen=True)
class JoinRequest:
    """JoinGroup. ``member_id`` is empty on a member's first join; ``protocols`` name the assignors it
    supports, most preferred first."""

    member_id: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: tuple[str, ...]
    subscription: Subscription = Subscription()
    group_instance_id: str | None = None
    protocol_type: str = CONSUMER_PROTOCOL
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True)
class SyncRequest:
    """SyncGroup. Only the leader sends ``assignments`` (member id -> partitions)."""

    member_id: str
    generation: int
    assignments: tuple[tuple[str, frozenset[TopicPartition]], ...] = ()
    group_instance_id: str | None = None
    protocol_type: str | None = None
    protocol_name: str | None = None


@dataclass(frozen=True)
class HeartbeatRequest:
    member_id: str
    generation: int
    group_instance_id: str | None = None


@dataclass(frozen=True)
class LeaveRequest:
    member_id: str
    group_instance_id: str | None = None


@dataclass(frozen=True)
class JoinReply:
    """The JoinGroup answer. The leader (``member_id == leader_id``) gets every member's subscription in
    ``members`` and computes the assignment, unless ``skip_assignment`` (a static leader that came back to a
    stable group: its assignment stands)."""

    member_id: str
    generation: int = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    skip_assignment: bool = False
    members: tuple[MemberSubscription, ...] = ()
    error: GroupCoordinatorError | None = None


@dataclass(frozen=True)
class SyncReply:
    member_id: str
    generation: int = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: frozenset[TopicPartition] = frozenset()
    error: GroupCoordinatorError | None = None


@dataclass(frozen=True)
class HeartbeatReply:
    member_id: str
    error: GroupCoordinatorError | None = None


@dataclass(frozen=True)
class LeaveReply:
    member_id: str
    error: GroupCoordinatorError | None = None


Reply: TypeAlias = JoinReply | SyncReply | HeartbeatReply | LeaveReply


@dataclass(frozen=True)
class MemberRecord:
    """A member as it survives a coordinator failover. ``assignment`` is what the current generation gives
    it; ``delivered`` what it was last told it holds (it may not have received its newest assignment yet);
    ``revoking`` what it gave up and no one else holds yet: it may still commit those offsets."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: tuple[str, ...]
    subscription: Subscription
    assignment: frozenset[TopicPartition]
    revoking: frozenset[TopicPartition] = frozenset()
    delivered: frozenset[TopicPartition] = frozenset()


@dataclass(frozen=True)
class GroupMetadataRecord:
    """The whole group at the end of a rebalance (or when it empties, or a static member is replaced).

    The last record of a group wins: replaying a group's records rebuilds it (Kafka's GroupMetadataValue).
    ``state`` is EMPTY or STABLE.
    """

    group_id: str
    generation: int
    state: GroupState
    protocol_type: str | None
    protocol_name: str | None
    leader_id: str
    members: tuple[MemberRecord, ...]
    timestamp_ms: int


@dataclass(frozen=True)
class GroupTombstone:
    """The group was deleted."""

    group_id: str


GroupRecord: TypeAlias = GroupMetadataRecord | GroupTombstone


@dataclass(frozen=True)
class Outcome:
    """What a transition asks the driver to do, in this order:

    1. append ``records`` to the group's ``__consumer_offsets`` partition and wait for them to commit;
    2. answer the caller with ``reply``, or if it is None park the request under ``parked_as`` (a member
       id: a new static member learns its id only from the answer), for a later outcome to answer;
    3. answer each parked request in ``deferred`` (addressed by member id and reply type; one request per
       member and type waits, a newer one replaces an older, which the driver answers with
       ``RebalanceInProgressError``).

    If the records cannot be committed the driver has lost the partition's leadership: it drops the
    coordinator and answers every waiter with ``GroupDeadError`` (the group reloads on the new leader).
    """

    reply: Reply | None = None
    deferred: tuple[Reply, ...] = ()
    records: tuple[GroupRecord, ...] = ()
    parked_as: str = ""
