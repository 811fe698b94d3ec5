"""multiraft: a Raft-replicated, partitioned message log.

The node runtime lives in this package; the Raft algorithm in :mod:`multiraft.raft`. The client API
(``from multiraft import Producer, Consumer, Admin``) is loaded on first use (PEP 562), so that importing
``multiraft`` for the node runtime does not load grpc or pyarrow.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from multiraft.client import (
        Admin,
        AssignmentChangedError,
        BatchMetadata,
        ClusterConfig,
        ClusterInfo,
        ConfigEntry,
        ConfigError,
        ConnectionFailedError,
        Consumer,
        CoordinatorMovedError,
        CorruptBatchError,
        CorruptRecordBatchError,
        DrainRefusedError,
        DrainStatus,
        GroupDescription,
        GroupError,
        GroupFullError,
        GroupListing,
        GroupListingResult,
        GroupMemberInfo,
        GroupNotEmptyError,
        GroupProtocolMismatchError,
        GroupRebalancingError,
        InstanceFencedError,
        InsufficientStorageError,
        InvalidArgumentError,
        InvalidGroupAssignmentError,
        InvalidProducerEpochError,
        InvalidTopicError,
        LeaderNotAvailableError,
        MemberFencedError,
        MemberIdAssignedError,
        MoveInfo,
        MultiraftError,
        NodeHasReplicasError,
        NotEnoughReplicasError,
        NotFoundError,
        NotLeaderError,
        OffsetOutOfRangeError,
        OperationNotAllowedError,
        OutOfOrderSequenceError,
        PartitionInfo,
        PartitionNotAssignedError,
        Producer,
        ProducerError,
        ProducerFencedError,
        Record,
        RecordMetadata,
        RecordTooLargeError,
        RequestTimeoutError,
        ResourceExhaustedError,
        SessionTimeoutOutOfRangeError,
        StaleGenerationError,
        StorageFailureError,
        TlsSettings,
        TopicExistsError,
        TopicInfo,
        TopicPartition,
        UnavailableError,
        UnavailablePartition,
        UnknownMemberError,
        UnknownNodeError,
        UnknownPartitionError,
        UnknownProducerIdError,
        UnknownTopicError,
        UnsupportedError,
    )

__all__ = [
    "__version__",
    "Producer",
    "Consumer",
    "Admin",
    "TlsSettings",
    "TopicPartition",
    "Record",
    "RecordMetadata",
    "BatchMetadata",
    "TopicInfo",
    "PartitionInfo",
    "ClusterConfig",
    "ConfigEntry",
    "ClusterInfo",
    "DrainStatus",
    "GroupDescription",
    "GroupListing",
    "GroupListingResult",
    "UnavailablePartition",
    "GroupMemberInfo",
    "MoveInfo",
    "MultiraftError",
    "ConfigError",
    "InvalidArgumentError",
    "RecordTooLargeError",
    "CorruptBatchError",
    "CorruptRecordBatchError",
    "InvalidTopicError",
    "NotFoundError",
    "UnknownTopicError",
    "UnknownNodeError",
    "UnknownPartitionError",
    "TopicExistsError",
    "OffsetOutOfRangeError",
    "NotLeaderError",
    "ProducerError",
    "OutOfOrderSequenceError",
    "ProducerFencedError",
    "UnknownProducerIdError",
    "InvalidProducerEpochError",
    "NotEnoughReplicasError",
    "NodeHasReplicasError",
    "DrainRefusedError",
    "OperationNotAllowedError",
    "AssignmentChangedError",
    "RequestTimeoutError",
    "ResourceExhaustedError",
    "InsufficientStorageError",
    "UnavailableError",
    "ConnectionFailedError",
    "LeaderNotAvailableError",
    "StorageFailureError",
    "UnsupportedError",
    "AuthenticationFailedError",
    "AuthorizationFailedError",
    "UserExistsError",
    "UnknownUserError",
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
    "AclBinding",
    "AclFilter",
    "UserInfo",
]

__version__ = "0.1.0"

_ERRORS = frozenset(name for name in __all__ if name.endswith("Error"))


def __getattr__(name: str) -> Any:
    if name in _ERRORS:
        value = getattr(importlib.import_module("multiraft.errors"), name)
    elif name in __all__:
        value = getattr(importlib.import_module("multiraft.client"), name)
    else:
        raise AttributeError(f"module 'multiraft' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
