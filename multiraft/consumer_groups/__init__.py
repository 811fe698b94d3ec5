"""Consumer groups: the coordinator of a group's membership, assignment and fencing, sans-IO.

Pure Python with no I/O, clock, randomness or threads: the node runtime (gRPC surface, later a Kafka
front door) drives it with the time and an injected member-id factory. Modules: :mod:`.coordinator` (the
state machine of one group), :mod:`.assignors` (range, roundrobin, sticky, cooperative-sticky),
:mod:`.fencing` (may this offset commit move the group's offsets?), :mod:`.records` (the replicated records'
encoding), :mod:`.registry` (the last record of each group on a replica), :mod:`.errors`.
docs/architecture.md, "Consumer-group coordinator", draws the transitions.
"""

from __future__ import annotations

from ._model import (
    CONSUMER_PROTOCOL,
    NO_GENERATION,
    GroupMetadataRecord,
    GroupRecord,
    GroupSettings,
    GroupState,
    GroupTombstone,
    HeartbeatReply,
    HeartbeatRequest,
    JoinReply,
    JoinRequest,
    LeaveReply,
    LeaveRequest,
    MemberRecord,
    MemberSubscription,
    Outcome,
    Reply,
    Subscription,
    SyncReply,
    SyncRequest,
    TopicPartition,
)
from .assignors import (
    ASSIGNORS,
    COOPERATIVE_ASSIGNORS,
    Assignment,
    Assignor,
    TopicRacks,
    assign_for_leader,
    assignor,
    cooperative_sticky_assign,
    previous_owners,
    range_assign,
    roundrobin_assign,
    sticky_assign,
    topics_without_racks,
)
from .coordinator import GroupCoordinator, MemberIdFactory
from .errors import (
    FencedInstanceIdError,
    GroupCoordinatorError,
    GroupDeadError,
    GroupFencedError,
    GroupMaxSizeReachedError,
    GroupRecordCodecError,
    GroupRecordDecodeError,
    GroupRecordEncodeError,
    GroupSettingsError,
    IllegalAssignmentError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    InvalidSessionTimeoutError,
    MemberIdRequiredError,
    NonEmptyGroupError,
    PartitionNotOwnedError,
    RebalanceInProgressError,
    UnknownAssignorError,
    UnknownMemberIdError,
)
from .fencing import check_offset_commit
from .records import GROUP_RECORD_FORMAT, decode_group_record, encode_group_record, is_group_record
from .registry import GroupRecords

__all__ = [
    # the state machine
    "GroupCoordinator",
    "MemberIdFactory",
    "GroupSettings",
    "GroupState",
    "Outcome",
    "CONSUMER_PROTOCOL",
    "NO_GENERATION",
    "TopicPartition",
    # requests and replies
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
    # replicated records
    "GroupRecord",
    "GroupMetadataRecord",
    "GroupTombstone",
    "MemberRecord",
    "GROUP_RECORD_FORMAT",
    "encode_group_record",
    "decode_group_record",
    "is_group_record",
    "GroupRecords",
    # assignors
    "Assignor",
    "Assignment",
    "TopicRacks",
    "ASSIGNORS",
    "COOPERATIVE_ASSIGNORS",
    "assignor",
    "assign_for_leader",
    "range_assign",
    "roundrobin_assign",
    "sticky_assign",
    "cooperative_sticky_assign",
    "previous_owners",
    "topics_without_racks",
    # fencing
    "check_offset_commit",
    # errors
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
