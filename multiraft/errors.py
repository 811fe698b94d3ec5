"""Errors of multiraft, shared by the node and the client library.

Each error has a stable machine-readable ``reason`` and the gRPC status code it travels with. The node raises
them; the gRPC servicers turn them into a status whose ``google.rpc.ErrorInfo`` carries the reason and
``metadata``; the client turns that status back into the same class. So a caller handles one hierarchy
whichever side of the wire an error started on::

    MultiraftError
    ├── ConfigError                 a configuration key is wrong; ``field`` names it
    ├── InvalidArgumentError        a request field is wrong; ``field`` names it
    │   ├── RecordTooLargeError     a record batch above the topic's max.message.bytes
    │   ├── CorruptBatchError       a record batch fails its header or CRC check
    │   └── InvalidTopicError       a bad topic name or topic config
    ├── NotFoundError
    │   ├── UnknownTopicError
    │   ├── UnknownPartitionError
    │   ├── UnknownNodeError        no registered node has this id (drain, remove)
    │   └── UnknownUserError        no SCRAM user has this name
    ├── TopicExistsError
    ├── OffsetOutOfRangeError       below the log start or beyond the high watermark
    ├── NotLeaderError              retry on ``leader_id`` / ``leader_address`` (may be unknown)
    ├── ProducerError
    │   ├── OutOfOrderSequenceError an idempotent producer skipped a sequence number
    │   ├── ProducerFencedError     a newer epoch of the producer id exists
    │   ├── UnknownProducerIdError  a producer id the controller never handed out
    │   └── InvalidProducerEpochError an epoch InitProducer never granted
    ├── NotEnoughReplicasError      not enough live nodes for the replication factor or a write quorum
    ├── NodeHasReplicasError        a node still holds replicas (drain it before removing it)
    ├── DrainRefusedError           draining would leave fewer active nodes than a topic's replication factor
    ├── OperationNotAllowedError    a peer asked for a controller operation peers may not forward
    ├── AuthenticationFailedError   no, expired or wrong credentials (UNAUTHENTICATED); the message says which
    ├── AuthorizationFailedError    no ACL allows it (PERMISSION_DENIED); names principal, operation, resource
    ├── UserExistsError             ``multiraft user create`` of a user that exists
    ├── AssignmentChangedError      a planned replica change lost a race with another change; plan again
    ├── RequestTimeoutError         the request did not complete within its deadline (outcome unknown)
    ├── UnavailableError            the node or cluster cannot serve now; retry later
    │   ├── ConnectionFailedError   the client could not reach any node
    │   └── LeaderNotAvailableError a partition has no leader that answers (``topic``, ``partition`` name it)
    ├── UnsupportedError            the node's version does not serve this method (UNIMPLEMENTED)
    ├── ResourceExhaustedError      a node budget (in-flight bytes, calls) or resource is used up; retry later
    │   └── InsufficientStorageError disk, LMDB map or segment slots below their low-water mark; ``resource``,
    │                               ``node_id`` and the free amount name what is short
    ├── CorruptRecordBatchError     a consumer read a batch it cannot decode; names topic, partition, offset
    ├── StorageFailureError         a node's storage failed (disk full, corruption)
    └── GroupError                  a consumer-group request was refused (reason: Kafka's error name)
        ├── MemberFencedError       not (or no longer) the member of the current generation it claims to be
        │   ├── UnknownMemberError  UNKNOWN_MEMBER_ID: expired, left or never joined
        │   ├── StaleGenerationError ILLEGAL_GENERATION: missed a rebalance
        │   ├── InstanceFencedError FENCED_INSTANCE_ID: a newer process holds the static instance id
        │   └── PartitionNotAssignedError PARTITION_NOT_OWNED: a commit for a partition it does not own
        ├── GroupRebalancingError REBALANCE_IN_PROGRESS (ABORTED): join again
        ├── MemberIdAssignedError   MEMBER_ID_REQUIRED: join again with ``member_id``
        ├── GroupProtocolMismatchError, SessionTimeoutOutOfRangeError, GroupFullError,
        │   InvalidGroupAssignmentError, GroupNotEmptyError
    CoordinatorMovedError (an UnavailableError) COORDINATOR_NOT_AVAILABLE: the coordinator moved; retriable
"""

from __future__ import annotations

from collections.abc import Mapping

import grpc

__all__ = [
    "MultiraftError",
    "ConfigError",
    "InvalidArgumentError",
    "RecordTooLargeError",
    "CorruptBatchError",
    "InvalidTopicError",
    "NotFoundError",
    "UnknownTopicError",
    "UnknownPartitionError",
    "UnknownNodeError",
    "TopicExistsError",
    "OffsetOutOfRangeError",
    "NotLeaderError",
    "ProducerError",
    "OutOfOrderSequenceError",
    "ProducerFencedError",
    "UnknownProducerIdError",
    "InvalidProducerEpochError",
    "DrainRefusedError",
    "OperationNotAllowedError",
    "AuthenticationFailedError",
    "AuthorizationFailedError",
    "UserExistsError",
    "UnknownUserError",
    "NotEnoughReplicasError",
    "NodeHasReplicasError",
    "AssignmentChangedError",
    "RequestTimeoutError",
    "ResourceExhaustedError",
    "UnavailableError",
    "ConnectionFailedError",
    "LeaderNotAvailableError",
    "UnsupportedError",
    "StorageFailureError",
    "InsufficientStorageError",
    "CorruptRecordBatchError",
    "GroupError",
    "MemberFencedError",
    "UnknownMemberError",
    "StaleGenerationError",
    "InstanceFencedError",
    "PartitionNotAssignedError",
    "GroupRebalancingError",
    "MemberIdAssignedError",
    "GroupProtocolMismatchError",
    "SessionTimeoutOutOfRangeError",
    "GroupFullError",
    "InvalidGroupAssignmentError",
    "GroupNotEmptyError",
    "CoordinatorMovedError",
    "error_for_reason",
    "REASONS",
]

DOMAIN = "multiraft"


class MultiraftError(Exception):
    """Base of every multiraft error. ``metadata`` holds string details that travel over the wire."""

    reason = "INTERNAL"
    code = grpc.StatusCode.INTERNAL
    retriable = False

    def __init__(self, message: str, **metadata: object) -> None:
        super().__init__(message)
        self.message = message
        self.metadata: dict[str, str] = {k: str(v) for k, v in metadata.items() if v is not None}

    @classmethod
    def from_wire(cls, message: str, metadata: Mapping[str, str]) -> MultiraftError:
        error = cls.__new__(cls)
        Exception.__init__(error, message)
        error.message = message  # metadata is set as is: its keys may be any strings ("message" too)
        error.metadata = {str(k): str(v) for k, v in metadata.items()}
        return error


class ConfigError(MultiraftError, ValueError):
    """A configuration key has a wrong value."""

    reason = "INVALID_CONFIG"
    code = grpc.StatusCode.INVALID_ARGUMENT

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}", field=field)

    @property
    def field(self) -> str:
        return self.metadata.get("field", "")


class InvalidArgumentError(MultiraftError, ValueError):
    """A request field is wrong; ``field`` names it."""

    reason = "INVALID_ARGUMENT"
    code = grpc.StatusCode.INVALID_ARGUMENT

    @property
    def field(self) -> str:
        return self.metadata.get("field", "")


class RecordTooLargeError(InvalidArgumentError):
    reason = "RECORD_TOO_LARGE"


class CorruptBatchError(InvalidArgumentError):
    reason = "CORRUPT_BATCH"


class InvalidTopicError(InvalidArgumentError):
    reason = "INVALID_TOPIC"


class NotFoundError(MultiraftError):
    reason = "NOT_FOUND"
    code = grpc.StatusCode.NOT_FOUND


class UnknownTopicError(NotFoundError):
    reason = "UNKNOWN_TOPIC"


class UnknownNodeError(NotFoundError):
    """No registered node has this id (drain, remove)."""

    reason = "UNKNOWN_NODE"


class UnknownPartitionError(NotFoundError):
    reason = "UNKNOWN_PARTITION"


class TopicExistsError(MultiraftError):
    reason = "TOPIC_EXISTS"
    code = grpc.StatusCode.ALREADY_EXISTS


class OffsetOutOfRangeError(MultiraftError):
    """``log_start_offset`` and ``high_watermark`` in metadata say what is readable."""

    reason = "OFFSET_OUT_OF_RANGE"
    code = grpc.StatusCode.OUT_OF_RANGE


class NotLeaderError(MultiraftError):
    """This node does not lead the partition; ``leader_id`` (0 if unknown) and ``leader_address`` may help."""

    reason = "NOT_LEADER"
    code = grpc.StatusCode.FAILED_PRECONDITION
    retriable = True

    @property
    def leader_id(self) -> int:
        return int(self.metadata.get("leader_id", "0"))

    @property
    def leader_address(self) -> str:
        return self.metadata.get("leader_address", "")


class ProducerError(MultiraftError):
    reason = "PRODUCER_ERROR"
    code = grpc.StatusCode.FAILED_PRECONDITION


class OutOfOrderSequenceError(ProducerError):
    reason = "OUT_OF_ORDER_SEQUENCE"


class ProducerFencedError(ProducerError):
    reason = "PRODUCER_FENCED"


class UnknownProducerIdError(ProducerError):
    """Kafka's UNKNOWN_PRODUCER_ID: ids come from InitProducer (or are replay ids), never from the client.

    Retriable: the partition leader's copy of the controller state may lag the node that handed the id out."""

    reason = "UNKNOWN_PRODUCER_ID"
    retriable = True


class InvalidProducerEpochError(ProducerError):
    """Kafka's INVALID_PRODUCER_EPOCH: an epoch above the one InitProducer granted."""

    reason = "INVALID_PRODUCER_EPOCH"


class NotEnoughReplicasError(MultiraftError):
    reason = "NOT_ENOUGH_REPLICAS"
    code = grpc.StatusCode.UNAVAILABLE
    retriable = True


class NodeHasReplicasError(MultiraftError):
    reason = "NODE_HAS_REPLICAS"
    code = grpc.StatusCode.FAILED_PRECONDITION


class DrainRefusedError(MultiraftError):
    """Draining the node would leave too few active nodes for an existing topic; ``force`` overrides."""

    reason = "DRAIN_REFUSED"
    code = grpc.StatusCode.FAILED_PRECONDITION


class OperationNotAllowedError(MultiraftError):
    """A controller operation a peer may not forward (only the client path, or the leader itself, may)."""

    reason = "NOT_ALLOWED"
    code = grpc.StatusCode.PERMISSION_DENIED


class AuthenticationFailedError(MultiraftError):
    """The call carries no valid credentials: none, an expired or forged token, an unknown user, a bad proof."""

    reason = "AUTHENTICATION_FAILED"
    code = grpc.StatusCode.UNAUTHENTICATED


class AuthorizationFailedError(MultiraftError):
    """The authenticated principal may not do this; ``principal``, ``operation`` and ``resource`` say what."""

    reason = "AUTHORIZATION_FAILED"
    code = grpc.StatusCode.PERMISSION_DENIED


class UserExistsError(MultiraftError):
    reason = "USER_EXISTS"
    code = grpc.StatusCode.ALREADY_EXISTS


class UnknownUserError(NotFoundError):
    reason = "UNKNOWN_USER"


class AssignmentChangedError(MultiraftError):
    reason = "ASSIGNMENT_CHANGED"
    code = grpc.StatusCode.ABORTED
    retriable = True


class RequestTimeoutError(MultiraftError):
    reason = "TIMEOUT"
    code = grpc.StatusCode.DEADLINE_EXCEEDED
    retriable = True


class ResourceExhaustedError(MultiraftError):
    """A budget of the node (``field`` names its config key) is used up by other requests, or a resource that
    may be freed (retention, deleted topics, an operator); retriable."""

    reason = "RESOURCE_EXHAUSTED"
    code = grpc.StatusCode.RESOURCE_EXHAUSTED
    retriable = True


class UnavailableError(MultiraftError):
    reason = "UNAVAILABLE"
    code = grpc.StatusCode.UNAVAILABLE
    retriable = True


class ConnectionFailedError(UnavailableError):
    reason = "CONNECTION_FAILED"


class LeaderNotAvailableError(UnavailableError):
    """No leader of the partition ``topic``/``partition`` answered within the node's bound (none elected, or
    the one known unreachable): every node would say the same, so asking another does not help; retriable
    later (Kafka's ``LEADER_NOT_AVAILABLE``)."""

    reason = "LEADER_NOT_AVAILABLE"


class UnsupportedError(MultiraftError):
    """Not retriable: waiting will not teach the node a method its version does not have."""

    reason = "UNSUPPORTED"
    code = grpc.StatusCode.UNIMPLEMENTED


class CorruptRecordBatchError(MultiraftError):
    """A consumer met a batch it cannot decode (corrupt, or written before batches were checked): ``topic``,
    ``partition`` and ``offset`` name it; ``Consumer.skip_batch`` (or a seek to ``next_offset``) reads on."""

    reason = "CORRUPT_RECORD_BATCH"
    code = grpc.StatusCode.DATA_LOSS

    @property
    def topic(self) -> str:
        return self.metadata.get("topic", "")

    @property
    def partition(self) -> int:
        return int(self.metadata.get("partition", "-1"))

    @property
    def offset(self) -> int:
        return int(self.metadata.get("offset", "-1"))

    @property
    def next_offset(self) -> int:
        return int(self.metadata.get("next_offset", "-1"))


class StorageFailureError(MultiraftError):
    reason = "STORAGE_ERROR"
    code = grpc.StatusCode.INTERNAL


class InsufficientStorageError(ResourceExhaustedError):
    """A node cannot store more: new writes (or new replicas) are refused before any work, reads go on.

    Not retriable: room comes back only when retention, a deletion or an operator frees it, so a client
    that waited out its deadline would only hide the cause (it may retry later, and writes resume then)."""

    reason = "STORAGE_FULL"
    retriable = False


# ------------------------------------------------------------------------------------------ consumer groups
# The wire face of multiraft.consumer_groups.errors (the coordinator's own tree): the same reasons, client-side names.


class GroupError(MultiraftError):
    """A consumer-group request was refused; ``reason`` is Kafka's error name."""

    reason = "GROUP_ERROR"
    code = grpc.StatusCode.FAILED_PRECONDITION


class MemberFencedError(GroupError):
    """The caller is not (or no longer) the member of the current generation it claims to be: its commits
    and heartbeats are refused (Kafka's CommitFailedException). Join the group again."""

    reason = "FENCED"


class UnknownMemberError(MemberFencedError):
    """The member id is not in the group: expired after its session timeout, left, or never joined."""

    reason = "UNKNOWN_MEMBER_ID"


class StaleGenerationError(MemberFencedError):
    """The member speaks for a generation other than the group's (it missed a rebalance)."""

    reason = "ILLEGAL_GENERATION"


class InstanceFencedError(MemberFencedError):
    """A newer process holds this static ``group_instance_id``."""

    reason = "FENCED_INSTANCE_ID"


class PartitionNotAssignedError(MemberFencedError):
    """An offset commit names a partition the member is not assigned in the current generation."""

    reason = "PARTITION_NOT_OWNED"


class GroupRebalancingError(GroupError):
    """The group is rebalancing: join again. Not retried by the call layer: the member must rejoin."""

    reason = "REBALANCE_IN_PROGRESS"
    code = grpc.StatusCode.ABORTED


class MemberIdAssignedError(GroupError):
    """A first join: join again with the member id in ``metadata["member_id"]``."""

    reason = "MEMBER_ID_REQUIRED"

    @property
    def member_id(self) -> str:
        return self.metadata.get("member_id", "")


class GroupProtocolMismatchError(GroupError):
    """The member's protocol type or assignors do not match the group's."""

    reason = "INCONSISTENT_GROUP_PROTOCOL"


class SessionTimeoutOutOfRangeError(GroupError):
    """The session timeout is outside the coordinator's allowed range."""

    reason = "INVALID_SESSION_TIMEOUT"
    code = grpc.StatusCode.INVALID_ARGUMENT


class GroupFullError(GroupError):
    """The group already has its most members (``group_max_size``)."""

    reason = "GROUP_MAX_SIZE_REACHED"
    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class InvalidGroupAssignmentError(GroupError):
    """The leader's assignment gives a partition twice, or moves one its owner has not revoked yet."""

    reason = "INVALID_ASSIGNMENT"
    code = grpc.StatusCode.INVALID_ARGUMENT


class GroupNotEmptyError(GroupError):
    """A group with members cannot be deleted (nor its offsets reset)."""

    reason = "NON_EMPTY_GROUP"


class CoordinatorMovedError(UnavailableError):
    """The group's coordinator moved (or the group was deleted meanwhile): ask again, retriable."""

    reason = "COORDINATOR_NOT_AVAILABLE"


def _all_subclasses(base: type[MultiraftError]) -> list[type[MultiraftError]]:
    found = [base]
    for sub in base.__subclasses__():
        found.extend(_all_subclasses(sub))
    return found


_BY_REASON: dict[str, type[MultiraftError]] = {cls.reason: cls for cls in _all_subclasses(MultiraftError)}
REASONS: frozenset[str] = frozenset(_BY_REASON)
"""Every error reason this version can send or recognise."""


def error_for_reason(reason: str, message: str, metadata: Mapping[str, str]) -> MultiraftError:
    """The error a wire ``reason`` stands for (MultiraftError itself for reasons this version does not know)."""
    return _BY_REASON.get(reason, MultiraftError).from_wire(message, metadata)
