"""multiraft: a Raft-replicated, partitioned message log. This module is the public face of its client.

>>> from multiraft import Producer, Consumer, Admin  # doctest: +SKIP

Every public name is in ``__all__``: the client classes, the values they take and return, and every error
they raise (docs/client.md, "The public face", lists them; ``tests/client/test_api.py`` holds the three lists
here and that one to each other). Everything else in the repository is private: the client's implementation
(:mod:`rpc.client`), the node runtime, the Raft core and the tools may change without notice.

Names load on first use (PEP 562), so ``import multiraft`` stays light: no grpc, no pyarrow and no engine
(storage, the Raft core, the node runtime) until a client class is used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from multiraft.errors import (
        AssignmentChangedError,
        AuthenticationFailedError,
        AuthorizationFailedError,
        ConfigError,
        ConnectionFailedError,
        CoordinatorMovedError,
        CorruptBatchError,
        CorruptRecordBatchError,
        DrainRefusedError,
        GroupError,
        GroupFullError,
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
        MultiraftError,
        NodeHasReplicasError,
        NotEnoughReplicasError,
        NotFoundError,
        NotLeaderError,
        OffsetOutOfRangeError,
        OperationNotAllowedError,
        OutOfOrderSequenceError,
        PartitionNotAssignedError,
        ProducerError,
        ProducerFencedError,
        RecordTooLargeError,
        RequestTimeoutError,
        ResourceExhaustedError,
        SessionTimeoutOutOfRangeError,
        StaleGenerationError,
        StorageFailureError,
        TopicExistsError,
        UnavailableError,
        UnknownMemberError,
        UnknownNodeError,
        UnknownPartitionError,
        UnknownProducerIdError,
        UnknownTopicError,
        UnknownUserError,
        UnsupportedError,
        UserExistsError,
    )
    from rpc.client._admin import (
        Admin,
        ClusterConfig,
        ClusterInfo,
        ConfigEntry,
        DrainStatus,
        MoveInfo,
        NodeInfo,
        NodeLoad,
        PartitionInfo,
        TopicInfo,
    )
    from rpc.client._consumer import (
        Consumer,
    )
    from rpc.client._consumer_group_admin import (
        GroupDescription,
        GroupListing,
        GroupListingResult,
        GroupMemberInfo,
        UnavailablePartition,
    )
    from rpc.client._producer import (
        Producer,
    )
    from rpc.client._records import (
        BatchMetadata,
        Record,
        RecordMetadata,
        TopicPartition,
    )
    from rpc.client._security_admin import (
        AclBinding,
        AclFilter,
        UserInfo,
    )
    from rpc.client._tls import (
        TlsSettings,
    )

__all__ = [
    "Producer",
    "Consumer",
    "Admin",
    "ClusterConfig",
    "ClusterInfo",
    "ConfigEntry",
    "DrainStatus",
    "MoveInfo",
    "NodeInfo",
    "NodeLoad",
    "PartitionInfo",
    "TopicInfo",
    "GroupDescription",
    "GroupListing",
    "GroupListingResult",
    "GroupMemberInfo",
    "UnavailablePartition",
    "AclBinding",
    "AclFilter",
    "UserInfo",
    "BatchMetadata",
    "Record",
    "RecordMetadata",
    "TopicPartition",
    "TlsSettings",
    "AssignmentChangedError",
    "AuthenticationFailedError",
    "AuthorizationFailedError",
    "ConfigError",
    "ConnectionFailedError",
    "CoordinatorMovedError",
    "CorruptBatchError",
    "CorruptRecordBatchError",
    "DrainRefusedError",
    "GroupError",
    "GroupFullError",
    "GroupNotEmptyError",
    "GroupProtocolMismatchError",
    "GroupRebalancingError",
    "InstanceFencedError",
    "InsufficientStorageError",
    "InvalidArgumentError",
    "InvalidGroupAssignmentError",
    "InvalidProducerEpochError",
    "InvalidTopicError",
    "LeaderNotAvailableError",
    "MemberFencedError",
    "MemberIdAssignedError",
    "MultiraftError",
    "NodeHasReplicasError",
    "NotEnoughReplicasError",
    "NotFoundError",
    "NotLeaderError",
    "OffsetOutOfRangeError",
    "OperationNotAllowedError",
    "OutOfOrderSequenceError",
    "PartitionNotAssignedError",
    "ProducerError",
    "ProducerFencedError",
    "RecordTooLargeError",
    "RequestTimeoutError",
    "ResourceExhaustedError",
    "SessionTimeoutOutOfRangeError",
    "StaleGenerationError",
    "StorageFailureError",
    "TopicExistsError",
    "UnavailableError",
    "UnknownMemberError",
    "UnknownNodeError",
    "UnknownPartitionError",
    "UnknownProducerIdError",
    "UnknownTopicError",
    "UnknownUserError",
    "UnsupportedError",
    "UserExistsError",
]

__version__ = "0.1.0"

# Where each public name is defined: the module is imported when one of its names is first used.
_HOMES: dict[str, tuple[str, ...]] = {
    "rpc.client._producer": ("Producer",),
    "rpc.client._consumer": ("Consumer",),
    "rpc.client._admin": (
        "Admin",
        "ClusterConfig",
        "ClusterInfo",
        "ConfigEntry",
        "DrainStatus",
        "MoveInfo",
        "NodeInfo",
        "NodeLoad",
        "PartitionInfo",
        "TopicInfo",
    ),
    "rpc.client._consumer_group_admin": (
        "GroupDescription",
        "GroupListing",
        "GroupListingResult",
        "GroupMemberInfo",
        "UnavailablePartition",
    ),
    "rpc.client._security_admin": (
        "AclBinding",
        "AclFilter",
        "UserInfo",
    ),
    "rpc.client._records": (
        "BatchMetadata",
        "Record",
        "RecordMetadata",
        "TopicPartition",
    ),
    "rpc.client._tls": ("TlsSettings",),
    "multiraft.errors": (
        "AssignmentChangedError",
        "AuthenticationFailedError",
        "AuthorizationFailedError",
        "ConfigError",
        "ConnectionFailedError",
        "CoordinatorMovedError",
        "CorruptBatchError",
        "CorruptRecordBatchError",
        "DrainRefusedError",
        "GroupError",
        "GroupFullError",
        "GroupNotEmptyError",
        "GroupProtocolMismatchError",
        "GroupRebalancingError",
        "InstanceFencedError",
        "InsufficientStorageError",
        "InvalidArgumentError",
        "InvalidGroupAssignmentError",
        "InvalidProducerEpochError",
        "InvalidTopicError",
        "LeaderNotAvailableError",
        "MemberFencedError",
        "MemberIdAssignedError",
        "MultiraftError",
        "NodeHasReplicasError",
        "NotEnoughReplicasError",
        "NotFoundError",
        "NotLeaderError",
        "OffsetOutOfRangeError",
        "OperationNotAllowedError",
        "OutOfOrderSequenceError",
        "PartitionNotAssignedError",
        "ProducerError",
        "ProducerFencedError",
        "RecordTooLargeError",
        "RequestTimeoutError",
        "ResourceExhaustedError",
        "SessionTimeoutOutOfRangeError",
        "StaleGenerationError",
        "StorageFailureError",
        "TopicExistsError",
        "UnavailableError",
        "UnknownMemberError",
        "UnknownNodeError",
        "UnknownPartitionError",
        "UnknownProducerIdError",
        "UnknownTopicError",
        "UnknownUserError",
        "UnsupportedError",
        "UserExistsError",
    ),
}
_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}


def __getattr__(name: str) -> Any:
    module = _HOME_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'multiraft' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
