"""Errors raised by the controller: the replicated cluster metadata, its commands and placement.

Every error derives from :class:`ControllerError`. Each class has a stable ``reason`` (the ``reason`` of the
wire's ``google.rpc.ErrorInfo``) and ``status`` (the name of the gRPC status code the servicers answer with),
and :attr:`ControllerError.metadata` gives the ErrorInfo metadata::

    ControllerError                          INTERNAL
    ├── TopicNotFoundError                   UNKNOWN_TOPIC (NOT_FOUND)
    ├── PartitionNotFoundError               UNKNOWN_PARTITION (NOT_FOUND)
    ├── DuplicateTopicError                  TOPIC_EXISTS (ALREADY_EXISTS)
    ├── UserNotFoundError                    UNKNOWN_USER (NOT_FOUND)
    ├── DuplicateUserError                   USER_EXISTS (ALREADY_EXISTS)
    ├── ControllerArgumentError (ValueError) INVALID_ARGUMENT (INVALID_ARGUMENT; metadata field)
    │   ├── InvalidTopicNameError            field "name"
    │   ├── InvalidConfigError               field = the config key, also as ``key``
    │   ├── InvalidReplicationFactorError    RF < 1, or more than the registered nodes could ever hold
    │   ├── InvalidPartitionCountError       partitions < 1
    │   ├── InvalidAssignmentError           replicas repeat a node, overlap the learners, leader not a replica
    │   ├── InvalidNodeError                 a NodeInfo or node-state change that can never be valid
    │   └── NodeNotFoundError                a node id that is not registered (or is removed, when placing)
    ├── NotEnoughNodesError                  NOT_ENOUGH_REPLICAS (UNAVAILABLE): too few live nodes right now
    ├── NotEnoughStorageError                STORAGE_FULL (RESOURCE_EXHAUSTED): the nodes cannot store the replicas
    ├── CapacityUnknownError                 UNAVAILABLE: a node has not reported its free storage yet; retry
    ├── NodeNotDrainedError                  NODE_HAS_REPLICAS (FAILED_PRECONDITION): drain it first
    ├── DrainUnderReplicatesError            DRAIN_REFUSED (FAILED_PRECONDITION): too few active nodes would remain
    ├── StaleAssignmentError                 ASSIGNMENT_CHANGED (ABORTED): a conditional replica change lost a race
    ├── OutOfOrderApplyError (RuntimeError)  INTERNAL: apply() called with an index that does not move forward
    └── CommandCodecError (ValueError)       INTERNAL
        ├── CommandEncodeError               a value the format cannot hold (NaN, an int beyond 64 bits)
        └── CommandDecodeError               malformed bytes (the decoders raise nothing else)
            └── UnsupportedVersionError      a format version or command type newer than this code knows

On the wire a reason travels as the :mod:`multiraft.errors` class of the same reason (``UNKNOWN_TOPIC`` as
``UnknownTopicError``, and so on); the names differ so that no two of our exception classes share one.

``NODE_HAS_REPLICAS`` and ``ASSIGNMENT_CHANGED`` are not in the list in ``rpc/proto/multiraft.proto``; the
second never reaches a client (only the controller leader's own replica moves are conditional).
"""

from __future__ import annotations

from typing import ClassVar

__all__ = [
    "ControllerError",
    "TopicNotFoundError",
    "PartitionNotFoundError",
    "DuplicateTopicError",
    "UserNotFoundError",
    "DuplicateUserError",
    "ControllerArgumentError",
    "InvalidTopicNameError",
    "InvalidConfigError",
    "InvalidReplicationFactorError",
    "InvalidPartitionCountError",
    "InvalidAssignmentError",
    "InvalidNodeError",
    "NodeNotFoundError",
    "NotEnoughNodesError",
    "NotEnoughStorageError",
    "CapacityUnknownError",
    "NodeNotDrainedError",
    "DrainUnderReplicatesError",
    "StaleAssignmentError",
    "OutOfOrderApplyError",
    "CommandCodecError",
    "CommandEncodeError",
    "CommandDecodeError",
    "UnsupportedVersionError",
]


class ControllerError(Exception):
    """Base class of every error raised by :mod:`multiraft.controller`."""

    reason: ClassVar[str] = "INTERNAL"
    status: ClassVar[str] = "INTERNAL"

    @property
    def metadata(self) -> dict[str, str]:
        """Key/value details for the wire's ErrorInfo metadata."""
        return {}


class TopicNotFoundError(ControllerError):
    """No topic has this name."""

    reason = "UNKNOWN_TOPIC"
    status = "NOT_FOUND"

    def __init__(self, topic: str) -> None:
        super().__init__(f"unknown topic {topic!r}")
        self.topic = topic

    @property
    def metadata(self) -> dict[str, str]:
        return {"topic": self.topic}


class PartitionNotFoundError(ControllerError):
    """The topic exists but has no partition with this number."""

    reason = "UNKNOWN_PARTITION"
    status = "NOT_FOUND"

    def __init__(self, topic: str, partition: int, partitions: int) -> None:
        super().__init__(f"topic {topic!r} has no partition {partition} (it has {partitions})")
        self.topic = topic
        self.partition = partition

    @property
    def metadata(self) -> dict[str, str]:
        return {"topic": self.topic, "partition": str(self.partition)}


class DuplicateTopicError(ControllerError):
    """A topic with this name already exists."""

    reason = "TOPIC_EXISTS"
    status = "ALREADY_EXISTS"

    def __init__(self, topic: str) -> None:
        super().__init__(f"topic {topic!r} already exists")
        self.topic = topic

    @property
    def metadata(self) -> dict[str, str]:
        return {"topic": self.topic}


class UserNotFoundError(ControllerError):
    """No SCRAM user has this name."""

    reason = "UNKNOWN_USER"
    status = "NOT_FOUND"

    def __init__(self, user: str) -> None:
        super().__init__(f"unknown user {user!r}")
        self.user = user

    @property
    def metadata(self) -> dict[str, str]:
        return {"user": self.user}


class DuplicateUserError(ControllerError):
    """A user with this name exists (and the request asked to create, not update)."""

    reason = "USER_EXISTS"
    status = "ALREADY_EXISTS"

    def __init__(self, user: str) -> None:
        super().__init__(f"user {user!r} already exists")
        self.user = user

    @property
    def metadata(self) -> dict[str, str]:
        return {"user": self.user}


class ControllerArgumentError(ControllerError, ValueError):
    """An argument that can never succeed; ``field`` names it."""

    reason = "INVALID_ARGUMENT"
    status = "INVALID_ARGUMENT"

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field

    @property
    def metadata(self) -> dict[str, str]:
        return {"field": self.field}


class InvalidTopicNameError(ControllerArgumentError):
    """The topic name breaks the naming rules (length, characters, or a reserved ``__`` prefix)."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__("name", f"invalid topic name {name!r}: {message}")
        self.name = name


class InvalidConfigError(ControllerArgumentError):
    """A topic config key is unknown, its value is wrong, or it may not be altered; ``key`` names it."""

    @property
    def key(self) -> str:
        return self.field


class InvalidReplicationFactorError(ControllerArgumentError):
    """The replication factor is below 1 or above the number of nodes registered in the cluster."""

    def __init__(self, replication_factor: int, nodes: int) -> None:
        if replication_factor < 1:
            message = f"must be at least 1, got {replication_factor}"
        else:
            message = f"{replication_factor} is more than the {nodes} node(s) in the cluster"
        super().__init__("replication_factor", message)
        self.replication_factor = replication_factor
        self.nodes = nodes


class InvalidPartitionCountError(ControllerArgumentError):
    """A topic needs at least one partition."""

    def __init__(self, partitions: int) -> None:
        super().__init__("partitions", f"must be at least 1, got {partitions}")
        self.partitions = partitions


class InvalidAssignmentError(ControllerArgumentError):
    """A replica assignment is malformed: empty, a node twice, learners overlapping voters, a bad leader."""


class InvalidNodeError(ControllerArgumentError):
    """Node information or a node state change that can never be valid (bad id, address, capacity)."""


class NodeNotFoundError(ControllerArgumentError):
    """The node id is not registered, or (where replicas are placed) the node was removed."""

    def __init__(self, node_id: int, message: str = "") -> None:
        super().__init__("node_id", message or f"unknown node {node_id}")
        self.node_id = node_id


class NotEnoughNodesError(ControllerError):
    """Fewer live, active nodes than the replication factor, or ``hosts`` (machines) they run on when that is
    what falls short: retrying after nodes join may succeed."""

    reason = "NOT_ENOUGH_REPLICAS"
    status = "UNAVAILABLE"

    def __init__(self, required: int, available: int, *, hosts: int | None = None) -> None:
        if hosts is None:
            message = f"{required} replicas need {required} live active nodes; {available} available"
        else:
            message = (
                f"{required} replicas need {required} live active nodes on distinct hosts (two replicas of a "
                f"partition never share a host); {available} available on {hosts} host(s)"
            )
        super().__init__(message)
        self.required = required
        self.available = available
        self.hosts = hosts

    @property
    def metadata(self) -> dict[str, str]:
        hosts = {} if self.hosts is None else {"hosts": str(self.hosts)}
        return {"required": str(self.required), "available": str(self.available), **hosts}


class NotEnoughStorageError(ControllerError):
    """The live nodes cannot store the replicas asked for (segment slots, disk or map below their low-water
    marks); ``short`` names, per node, what it lacks."""

    reason = "STORAGE_FULL"
    status = "RESOURCE_EXHAUSTED"

    def __init__(self, what: str, short: dict[int, str]) -> None:
        detail = "; ".join(f"node {node}: {reason}" for node, reason in sorted(short.items()))
        super().__init__(f"not enough storage for {what}: {detail}")
        self.short = dict(short)

    @property
    def metadata(self) -> dict[str, str]:
        return {"resource": "storage", "nodes": ",".join(str(n) for n in sorted(self.short))}


class CapacityUnknownError(ControllerError):
    """The controller leader has no capacity report yet from nodes a placement could use (it was just
    elected, or they just joined): retrying in a moment succeeds."""

    reason = "UNAVAILABLE"
    status = "UNAVAILABLE"

    def __init__(self, nodes: list[int]) -> None:
        super().__init__(f"node(s) {nodes} have not reported their free storage to the controller leader yet")
        self.nodes = list(nodes)


class NodeNotDrainedError(ControllerError):
    """A node cannot be removed while it is a replica or learner of any partition (drain it first)."""

    reason = "NODE_HAS_REPLICAS"
    status = "FAILED_PRECONDITION"

    def __init__(self, node_id: int, replicas: int) -> None:
        super().__init__(f"node {node_id} still holds {replicas} replica(s); drain it before removing it")
        self.node_id = node_id
        self.replicas = replicas

    @property
    def metadata(self) -> dict[str, str]:
        return {"node_id": str(self.node_id), "replicas": str(self.replicas)}


class DrainUnderReplicatesError(ControllerError):
    """Draining a node would leave fewer active nodes than a topic's replication factor, or fewer ``hosts``
    (machines) they run on (Redpanda refuses such a decommission too): its replicas would have nowhere to go.
    ``force`` drains anyway."""

    reason = "DRAIN_REFUSED"
    status = "FAILED_PRECONDITION"

    def __init__(
        self, node_id: int, topic: str, replication_factor: int, remaining: int, *, hosts: int | None = None
    ) -> None:
        left = f"{remaining} active node(s)" if hosts is None else f"{remaining} active node(s) on {hosts} host(s)"
        super().__init__(
            f"draining node {node_id} would leave {left}, fewer than the replication factor "
            f"{replication_factor} of topic {topic!r}; undrain another node, or force the drain "
            "(`multiraft node drain --force`)"
        )
        self.node_id = node_id
        self.topic = topic
        self.replication_factor = replication_factor
        self.remaining = remaining
        self.hosts = hosts

    @property
    def metadata(self) -> dict[str, str]:
        return {
            "node_id": str(self.node_id),
            "topic": self.topic,
            "replication_factor": str(self.replication_factor),
            "remaining": str(self.remaining),
            **({} if self.hosts is None else {"hosts": str(self.hosts)}),
        }


class StaleAssignmentError(ControllerError):
    """A conditional replica change expected an assignment that has changed since it was planned."""

    reason = "ASSIGNMENT_CHANGED"
    status = "ABORTED"


class OutOfOrderApplyError(ControllerError, RuntimeError):
    """apply() was called with a Raft index at or below the last applied one: a bug in the caller."""


class CommandCodecError(ControllerError, ValueError):
    """Base class of encoding errors of commands and snapshots."""


class CommandEncodeError(CommandCodecError):
    """A command or state holds a value the format cannot represent (a non-finite float, a huge int)."""


class CommandDecodeError(CommandCodecError):
    """The bytes are not a valid command or snapshot: truncated, malformed, or of the wrong shape."""


class UnsupportedVersionError(CommandDecodeError):
    """The bytes come from newer code (a newer format version or an unknown command type).

    Unlike other decode errors this one is local to this replica: newer replicas apply the command, so the
    runtime must stop applying (and upgrade) rather than skip it.
    """
