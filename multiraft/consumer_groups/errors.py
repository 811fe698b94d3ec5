"""Errors and refusals of the consumer-group coordinator (:mod:`multiraft.consumer_groups`).

The coordinator is sans-IO: it does not raise these at a caller over the wire, it puts an instance in the
``error`` of the reply it returns (and the fencing checks raise them). Each class has a stable ``reason``
(Kafka's error name, so a Kafka front door maps it one to one) and ``status`` (the gRPC status code name the
servicers answer with)::

    GroupCoordinatorError                 INTERNAL
    ├── GroupFencedError                  the caller is not (or no longer) the member it claims to be
    │   ├── UnknownMemberIdError          UNKNOWN_MEMBER_ID (FAILED_PRECONDITION): expired, left or never joined
    │   ├── IllegalGenerationError        ILLEGAL_GENERATION (FAILED_PRECONDITION): a stale generation
    │   ├── FencedInstanceIdError         FENCED_INSTANCE_ID (FAILED_PRECONDITION): a newer member holds the
    │   │                                 static group_instance_id
    │   └── PartitionNotOwnedError        PARTITION_NOT_OWNED (FAILED_PRECONDITION): an offset commit for a
    │                                     partition the member is not assigned in this generation
    ├── RebalanceInProgressError          REBALANCE_IN_PROGRESS (ABORTED): rejoin the group
    ├── MemberIdRequiredError             MEMBER_ID_REQUIRED (FAILED_PRECONDITION): join again with ``member_id``
    ├── InconsistentGroupProtocolError    INCONSISTENT_GROUP_PROTOCOL (FAILED_PRECONDITION)
    ├── InvalidSessionTimeoutError        INVALID_SESSION_TIMEOUT (INVALID_ARGUMENT)
    ├── GroupMaxSizeReachedError          GROUP_MAX_SIZE_REACHED (RESOURCE_EXHAUSTED)
    ├── IllegalAssignmentError            INVALID_ASSIGNMENT (INVALID_ARGUMENT): the leader's assignment gives
    │                                     a partition twice, or moves one its owner has not revoked yet
    ├── NonEmptyGroupError                NON_EMPTY_GROUP (FAILED_PRECONDITION): delete needs an empty group
    ├── GroupDeadError                    COORDINATOR_NOT_AVAILABLE (UNAVAILABLE): the group was deleted or
    │                                     its coordinator moved; find the coordinator again
    ├── GroupSettingsError (ValueError)   INVALID_ARGUMENT: a GroupSettings field is wrong; ``field`` names it
    ├── UnknownAssignorError (ValueError) INVALID_ARGUMENT: no assignor has this name
    └── GroupRecordCodecError (ValueError) INTERNAL
        ├── GroupRecordEncodeError        a value the record format cannot hold
        └── GroupRecordDecodeError        malformed bytes (the decoder raises nothing else)

Kafka returns ``UNKNOWN_MEMBER_ID`` to a zombie that was expired, ``ILLEGAL_GENERATION`` to one that missed a
rebalance and ``FENCED_INSTANCE_ID`` to the older of two processes sharing a ``group.instance.id``; it has no
per-partition check, which ``PartitionNotOwnedError`` adds so that a zombie cannot move a group's offsets.
"""

from __future__ import annotations

from typing import ClassVar

__all__ = [
    "GroupCoordinatorError",
    "GroupFencedError",
    "UnknownMemberIdError",
    "IllegalGenerationError",
    "FencedInstanceIdError",
    "PartitionNotOwnedError",
    "RebalanceInProgressError",
    "MemberIdRequiredError",
    "InconsistentGroupProtocolError",
    "InvalidSessionTimeoutError",
    "GroupMaxSizeReachedError",
    "IllegalAssignmentError",
    "NonEmptyGroupError",
    "GroupDeadError",
    "GroupSettingsError",
    "UnknownAssignorError",
    "GroupRecordCodecError",
    "GroupRecordEncodeError",
    "GroupRecordDecodeError",
]


class GroupCoordinatorError(Exception):
    """Base class of every error of :mod:`multiraft.consumer_groups`."""

    reason: ClassVar[str] = "INTERNAL"
    status: ClassVar[str] = "INTERNAL"

    def __eq__(self, other: object) -> bool:
        # Replies are compared in tests and simulations: two refusals are equal when they say the same thing.
        return type(other) is type(self) and str(other) == str(self)

    def __hash__(self) -> int:
        return hash((type(self), str(self)))


class GroupFencedError(GroupCoordinatorError):
    """The caller is not the member of the current generation it claims to be: its requests are refused."""

    reason = "FENCED"
    status = "FAILED_PRECONDITION"


class UnknownMemberIdError(GroupFencedError):
    """The member id is not in the group: it was expired, it left, or it never joined."""

    reason = "UNKNOWN_MEMBER_ID"

    def __init__(self, group: str, member_id: str) -> None:
        super().__init__(f"group {group!r} has no member {member_id!r}")
        self.member_id = member_id


class IllegalGenerationError(GroupFencedError):
    """The member speaks for a generation other than the group's current one (it missed a rebalance)."""

    reason = "ILLEGAL_GENERATION"

    def __init__(self, group: str, generation: int, current: int) -> None:
        super().__init__(f"group {group!r} is at generation {current}, not {generation}")
        self.generation = generation
        self.current = current


class FencedInstanceIdError(GroupFencedError):
    """Another member id now holds this static ``group_instance_id`` (a newer process of the same instance)."""

    reason = "FENCED_INSTANCE_ID"

    def __init__(self, group: str, instance_id: str, member_id: str) -> None:
        super().__init__(f"group {group!r}: instance {instance_id!r} is held by another member than {member_id!r}")
        self.instance_id = instance_id
        self.member_id = member_id


class PartitionNotOwnedError(GroupFencedError):
    """An offset commit names partitions the member is not assigned in the current generation."""

    reason = "PARTITION_NOT_OWNED"

    def __init__(self, group: str, member_id: str, partitions: list[tuple[str, int]]) -> None:
        shown = ", ".join(f"{t}/{p}" for t, p in partitions)
        super().__init__(f"group {group!r}: member {member_id!r} does not own {shown}")
        self.partitions = list(partitions)


class RebalanceInProgressError(GroupCoordinatorError):
    """The group is rebalancing: the member must join again (Kafka's REBALANCE_IN_PROGRESS)."""

    reason = "REBALANCE_IN_PROGRESS"
    status = "ABORTED"


class MemberIdRequiredError(GroupCoordinatorError):
    """A first join without a member id: join again with the ``member_id`` given here (Kafka's KIP-394)."""

    reason = "MEMBER_ID_REQUIRED"
    status = "FAILED_PRECONDITION"

    def __init__(self, group: str, member_id: str) -> None:
        super().__init__(f"group {group!r}: join again with member id {member_id!r}")
        self.member_id = member_id


class InconsistentGroupProtocolError(GroupCoordinatorError):
    """The member's protocol type differs from the group's, or it shares no assignor with the group."""

    reason = "INCONSISTENT_GROUP_PROTOCOL"
    status = "FAILED_PRECONDITION"


class InvalidSessionTimeoutError(GroupCoordinatorError):
    """The session timeout is outside the coordinator's [min_session_timeout_ms, max_session_timeout_ms]."""

    reason = "INVALID_SESSION_TIMEOUT"
    status = "INVALID_ARGUMENT"


class GroupMaxSizeReachedError(GroupCoordinatorError):
    """The group already has ``max_group_size`` members."""

    reason = "GROUP_MAX_SIZE_REACHED"
    status = "RESOURCE_EXHAUSTED"


class IllegalAssignmentError(GroupCoordinatorError):
    """The leader's assignment is refused: a partition goes to two members, or (cooperative) to a new owner
    while its previous owner, still a member, has not revoked it. The group rebalances again."""

    reason = "INVALID_ASSIGNMENT"
    status = "INVALID_ARGUMENT"


class NonEmptyGroupError(GroupCoordinatorError):
    """A group with members cannot be deleted."""

    reason = "NON_EMPTY_GROUP"
    status = "FAILED_PRECONDITION"


class GroupDeadError(GroupCoordinatorError):
    """The group was deleted or its coordinator moved away: find the coordinator again and retry."""

    reason = "COORDINATOR_NOT_AVAILABLE"
    status = "UNAVAILABLE"


class GroupSettingsError(GroupCoordinatorError, ValueError):
    """A :class:`~multiraft.consumer_groups.GroupSettings` field is wrong; ``field`` names it."""

    reason = "INVALID_ARGUMENT"
    status = "INVALID_ARGUMENT"

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class UnknownAssignorError(GroupCoordinatorError, ValueError):
    """No assignor has this name (known: range, roundrobin, sticky, cooperative-sticky)."""

    reason = "INVALID_ARGUMENT"
    status = "INVALID_ARGUMENT"


class GroupRecordCodecError(GroupCoordinatorError, ValueError):
    """Base class of the errors of the replicated group records' encoding."""


class GroupRecordEncodeError(GroupRecordCodecError):
    """A group holds a value the record format cannot represent."""


class GroupRecordDecodeError(GroupRecordCodecError):
    """The bytes are not a group record: truncated, malformed, of the wrong shape or a newer version."""
