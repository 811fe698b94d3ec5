"""The public client API of multiraft: Producer, Consumer, Admin, their values and their errors.

>>> from multiraft.client import Producer, Consumer, Admin                # doctest: +SKIP

The implementation lives in :mod:`rpc.client`; this module is the stable import path (docs/client.md).
"""

from __future__ import annotations

from multiraft.errors import (
    AssignmentChangedError,
    ConfigError,
    ConnectionFailedError,
    CorruptBatchError,
    InvalidArgumentError,
    InvalidTopicError,
    MultiraftError,
    NodeHasReplicasError,
    NotEnoughReplicasError,
    NotFoundError,
    NotLeaderError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    ProducerError,
    ProducerFencedError,
    RecordTooLargeError,
    RequestTimeoutError,
    StorageFailureError,
    TopicExistsError,
    UnavailableError,
    UnknownNodeError,
    UnknownPartitionError,
    UnknownTopicError,
    UnsupportedError,
)
from rpc.client import (
    Admin,
    BatchMetadata,
    ClusterInfo,
    Consumer,
    DrainStatus,
    MoveInfo,
    PartitionInfo,
    Producer,
    Record,
    RecordMetadata,
    TopicInfo,
    TopicPartition,
)

__all__ = [
    "Producer",
    "Consumer",
    "Admin",
    "TopicPartition",
    "Record",
    "RecordMetadata",
    "BatchMetadata",
    "TopicInfo",
    "PartitionInfo",
    "ClusterInfo",
    "DrainStatus",
    "MoveInfo",
    # errors (multiraft.errors)
    "MultiraftError",
    "ConfigError",
    "InvalidArgumentError",
    "RecordTooLargeError",
    "CorruptBatchError",
    "InvalidTopicError",
    "NotFoundError",
    "UnknownTopicError",
    "UnknownNodeError",
    "UnsupportedError",
    "UnknownPartitionError",
    "TopicExistsError",
    "OffsetOutOfRangeError",
    "NotLeaderError",
    "ProducerError",
    "OutOfOrderSequenceError",
    "ProducerFencedError",
    "NotEnoughReplicasError",
    "NodeHasReplicasError",
    "AssignmentChangedError",
    "RequestTimeoutError",
    "UnavailableError",
    "ConnectionFailedError",
    "StorageFailureError",
]
