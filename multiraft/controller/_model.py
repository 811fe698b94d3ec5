"""The replicated cluster metadata (nodes, topics, partitions) and the commands that change it."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property

from .errors import ControllerError, InvalidNodeError, PartitionNotFoundError, TopicNotFoundError
from .security import SECURITY_COMMAND_TYPES, SecurityCommand, SecurityState
from .topic_config import validate_topic_configs, validate_topic_name

__all__ = [
    "CONTROLLER_GROUP_ID",
    "FIRST_PARTITION_GROUP_ID",
    "FIRST_PRODUCER_ID",
    "MAX_PRODUCER_ID",
    "MAX_NODE_ID",
    "NodeState",
    "NodeInfo",
    "check_node_info",
    "PartitionState",
    "Topic",
    "ClusterState",
    "RegisterNode",
    "CreateTopic",
    "DeleteTopic",
    "AlterTopicConfigs",
    "SetPartitionReplicas",
    "SetNodeState",
    "AllocateProducerIds",
    "CreatePartitions",
    "AlterClusterConfigs",
    "Command",
    "COMMAND_TYPES",
]

CONTROLLER_GROUP_ID = 0
FIRST_PARTITION_GROUP_ID = 1
# Producer id 0 is valid in Kafka; starting at 1 keeps it apart from protobuf's "unset" 0 (-1 means "none").
FIRST_PRODUCER_ID = 1
# Ids from 2**62 up are replay producers' (derived from a key by the client); the controller never reaches them.
MAX_PRODUCER_ID = 2**62 - 1
MAX_NODE_ID = 2**31 - 1  # node ids are int32 on the wire, where 0 means "no node"
_MAX_ADDRESS_LENGTH = 255
_MAX_RACK_LENGTH = 255
_MAX_HOST_LENGTH = 64
# Capacities are relative weights; the bounds keep count / capacity far from overflow and underflow.
MIN_CAPACITY, MAX_CAPACITY = 1e-6, 1e6


class NodeState(StrEnum):
    """A node's administrative state. Liveness (alive, suspect, dead) comes from gossip, never from here."""

    ACTIVE = "active"  # may receive new replicas
    DRAINING = "draining"  # its replicas and leadership are being moved off
    REMOVED = "removed"  # forgotten: holds nothing and receives nothing until it registers again


@dataclass(frozen=True)
class NodeInfo:
    """A registered node: its addresses, rack, relative capacity, administrative state and host.

    Nodes that share a non-empty ``host`` run on one machine: placement never puts two replicas of a
    partition on them. An empty host is unknown: the node counts as a host of its own.
    """

    node_id: int
    client_address: str
    peer_address: str
    gossip_address: str
    rack: str = ""
    capacity: float = 1.0  # relative weight for placement: a node of capacity 2 receives twice the replicas
    state: NodeState = NodeState.ACTIVE
    host: str = ""


def check_node_info(node: NodeInfo) -> None:
    """Raise :class:`InvalidNodeError` naming the first field of ``node`` that can never be valid."""
    if not 1 <= node.node_id <= MAX_NODE_ID:
        raise InvalidNodeError("node_id", f"must be in [1, {MAX_NODE_ID}], got {node.node_id}")
    for name in ("client_address", "peer_address", "gossip_address"):
        _check_address(name, getattr(node, name))
    if len(node.rack) > _MAX_RACK_LENGTH or not node.rack.isprintable():
        raise InvalidNodeError("rack", f"must be printable and at most {_MAX_RACK_LENGTH} characters")
    if len(node.host) > _MAX_HOST_LENGTH or not node.host.isprintable():
        raise InvalidNodeError("host", f"must be printable and at most {_MAX_HOST_LENGTH} characters")
    if not (math.isfinite(node.capacity) and MIN_CAPACITY <= node.capacity <= MAX_CAPACITY):
        raise InvalidNodeError("capacity", f"must be in [{MIN_CAPACITY}, {MAX_CAPACITY}], got {node.capacity}")


def _check_address(name: str, address: str) -> None:
    host, colon, port = address.rpartition(":")
    if (
        not colon
        or not host
        or len(address) > _MAX_ADDRESS_LENGTH
        or not address.isprintable()
        or any(c.isspace() for c in address)
        or not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535)
    ):
        raise InvalidNodeError(name, f"must be host:port, got {address!r}")


@dataclass(frozen=True)
class PartitionState:
    """One partition: its Raft group, its voters (ordered, preferred leader first when placed), learners."""

    topic: str
    partition: int
    group_id: int
    replicas: tuple[int, ...]
    learners: tuple[int, ...] = ()
    preferred_leader: int = 0

    @property
    def members(self) -> tuple[int, ...]:
        """Voters then learners: every node that hosts a copy."""
        return self.replicas + self.learners


@dataclass(frozen=True)
class Topic:
    """A topic: its partitions in order, its normalized stored configs, and when it was created."""

    name: str
    partitions: tuple[PartitionState, ...]
    configs: dict[str, str]
    internal: bool = False
    created_ms: int = 0

    @cached_property  # a Topic never changes; callers ask it once per partition (10,000 partitions: O(N^2))
    def replication_factor(self) -> int:
        """The most common voter count of its partitions (a partition in the middle of a move has one more)."""
        counts = Counter(len(p.replicas) for p in self.partitions)
        return min(counts, key=lambda rf: (-counts[rf], rf)) if counts else 0


@dataclass(frozen=True)
class ClusterState:
    """The controller's replicated state. Immutable: :func:`~multiraft.controller.state.apply` returns a new one.

    The mappings must not be mutated; they are shared between successive states.
    """

    nodes: Mapping[int, NodeInfo] = field(default_factory=dict)
    topics: Mapping[str, Topic] = field(default_factory=dict)
    next_group_id: int = FIRST_PARTITION_GROUP_ID
    next_producer_id: int = FIRST_PRODUCER_ID
    applied_index: int = 0
    version: int = 0
    security: SecurityState = field(default_factory=SecurityState)  # users, ACLs, token key
    # Dynamic cluster-wide settings (multiraft.controller.cluster_config), normalized; only the keys set.
    cluster_configs: Mapping[str, str] = field(default_factory=dict)

    # ------------------------------------------------------------------------------------------- lookups

    def topic(self, name: str) -> Topic:
        """The topic called ``name``, or :class:`TopicNotFoundError`."""
        topic = self.topics.get(name)
        if topic is None:
            raise TopicNotFoundError(name)
        return topic

    def partition(self, topic: str, partition: int) -> PartitionState:
        """One partition, or :class:`TopicNotFoundError` / :class:`PartitionNotFoundError`."""
        found = self.topic(topic)
        if not 0 <= partition < len(found.partitions):
            raise PartitionNotFoundError(topic, partition, len(found.partitions))
        return found.partitions[partition]

    def groups(self) -> Mapping[int, PartitionState]:
        """Every partition by its Raft group id (the controller group, 0, is not listed)."""
        return self._groups

    def group(self, group_id: int) -> PartitionState | None:
        """The partition whose Raft group is ``group_id``, or None."""
        return self._groups.get(group_id)

    def partitions_on_node(self, node_id: int) -> tuple[PartitionState, ...]:
        """The partitions of which ``node_id`` is a voter or a learner, by group id."""
        return self._by_node.get(node_id, ())

    def replica_counts(self, *, include_learners: bool = True) -> dict[int, int]:
        """Replicas hosted per registered, not removed node (zero included)."""
        counts = {n.node_id: 0 for n in self.nodes.values() if n.state is not NodeState.REMOVED}
        for p in self._groups.values():
            for node in p.members if include_learners else p.replicas:
                counts[node] = counts.get(node, 0) + 1
        return counts

    def preferred_leader_counts(self) -> dict[int, int]:
        """Partitions each registered, not removed node is the preferred leader of (zero included)."""
        counts = {n.node_id: 0 for n in self.nodes.values() if n.state is not NodeState.REMOVED}
        for p in self._groups.values():
            counts[p.preferred_leader] = counts.get(p.preferred_leader, 0) + 1
        return counts

    def nodes_in_state(self, *states: NodeState) -> tuple[NodeInfo, ...]:
        """Registered nodes in any of ``states``, by id."""
        return tuple(self.nodes[n] for n in sorted(self.nodes) if self.nodes[n].state in states)

    @cached_property
    def _groups(self) -> dict[int, PartitionState]:
        groups = {p.group_id: p for t in self.topics.values() for p in t.partitions}
        return dict(sorted(groups.items()))

    @cached_property
    def _by_node(self) -> dict[int, tuple[PartitionState, ...]]:
        by_node: dict[int, list[PartitionState]] = {}
        for p in self._groups.values():
            for node in p.members:
                by_node.setdefault(node, []).append(p)
        return {node: tuple(parts) for node, parts in by_node.items()}

    # ---------------------------------------------------------------------------------------- invariants

    def invariant_violations(self) -> list[str]:
        """What is wrong with this state (empty when it is consistent). Apply keeps it empty."""
        problems: list[str] = []
        for node_id, node in self.nodes.items():
            if node.node_id != node_id:
                problems.append(f"node key {node_id} holds node {node.node_id}")
            try:
                check_node_info(node)
            except ControllerError as exc:
                problems.append(f"node {node_id}: {exc}")
        if not 0 <= self.version <= self.applied_index:
            problems.append(f"version {self.version} not in [0, applied_index {self.applied_index}]")
        if self.next_producer_id < FIRST_PRODUCER_ID:
            problems.append(f"next_producer_id {self.next_producer_id} < {FIRST_PRODUCER_ID}")
        seen_groups: set[int] = set()
        for name, topic in self.topics.items():
            if topic.name != name:
                problems.append(f"topic key {name!r} holds topic {topic.name!r}")
            try:
                validate_topic_name(name, internal=topic.internal)
                if validate_topic_configs(topic.configs, creating=True) != topic.configs:
                    problems.append(f"topic {name!r}: configs are not normalized")
            except ControllerError as exc:
                problems.append(f"topic {name!r}: {exc}")
            if not topic.partitions:
                problems.append(f"topic {name!r} has no partitions")
            for number, p in enumerate(topic.partitions):
                where = f"{name}/{number}"
                if p.topic != name or p.partition != number:
                    problems.append(f"{where} is labelled {p.topic}/{p.partition}")
                if not FIRST_PARTITION_GROUP_ID <= p.group_id < self.next_group_id or p.group_id in seen_groups:
                    problems.append(f"{where}: group id {p.group_id} is out of range or repeated")
                seen_groups.add(p.group_id)
                if not p.replicas or len(set(p.members)) != len(p.members):
                    problems.append(f"{where}: replicas {p.replicas} learners {p.learners} repeat or are empty")
                if p.preferred_leader not in p.replicas:
                    problems.append(f"{where}: preferred leader {p.preferred_leader} is not a replica")
                for node_id in p.members:
                    host = self.nodes.get(node_id)
                    if host is None or host.state is NodeState.REMOVED:
                        problems.append(f"{where}: node {node_id} is unknown or removed")
        return problems


# ---------------------------------------------------------------------------------------------- commands


@dataclass(frozen=True)
class RegisterNode:
    """Add a node, or update a registered node's addresses, rack, host and capacity (a restarted node re-registers).

    The state of a registered node is left alone (use :class:`SetNodeState`), except that a removed node
    comes back in ``node.state``.
    """

    node: NodeInfo


@dataclass(frozen=True)
class CreateTopic:
    """Create a topic whose placement the proposer decided: per partition, (voters, preferred leader).

    ``configs`` should be the result of ``validate_topic_configs(request, creating=True)`` so that the
    values fixed at creation travel in the command. ``internal`` allows (and requires) a ``__`` name.
    """

    name: str
    configs: Mapping[str, str]
    assignments: tuple[tuple[tuple[int, ...], int], ...]
    internal: bool = False
    created_ms: int = 0


@dataclass(frozen=True)
class DeleteTopic:
    """Delete a topic. Internal topics are deleted only with ``internal=True`` (by the system)."""

    name: str
    internal: bool = False


@dataclass(frozen=True)
class AlterTopicConfigs:
    """Set and reset (``delete``: back to the default) config keys of a topic, all or nothing."""

    name: str
    set: Mapping[str, str] = field(default_factory=dict)
    delete: tuple[str, ...] = ()


@dataclass(frozen=True)
class SetPartitionReplicas:
    """Replace a partition's voters, learners and preferred leader (one step of a replica move).

    When ``expected_replicas``/``expected_learners`` are given, the command fails with
    :class:`~multiraft.controller.errors.StaleAssignmentError` unless the partition still has them, so that a
    move planned by an old controller leader cannot undo a newer change.
    """

    topic: str
    partition: int
    replicas: tuple[int, ...]
    learners: tuple[int, ...]
    preferred_leader: int
    expected_replicas: tuple[int, ...] | None = None
    expected_learners: tuple[int, ...] | None = None


@dataclass(frozen=True)
class SetNodeState:
    """Mark a node active, draining or removed. Removal is refused while it holds any replica."""

    node_id: int
    state: NodeState


@dataclass(frozen=True)
class AlterClusterConfigs:
    """Set and reset (``delete``: back to the default) dynamic cluster-wide settings, all or nothing."""

    set: Mapping[str, str] = field(default_factory=dict)
    delete: tuple[str, ...] = ()


@dataclass(frozen=True)
class AllocateProducerIds:
    """Reserve ``count`` consecutive producer ids; the result is the first one. With a ``principal`` the block
    is bound to it: only that principal may produce with its ids (authorization on)."""

    count: int
    principal: str = ""


# ------------------------------------------------------------------------ adding partitions (issue 25)


@dataclass(frozen=True)
class CreatePartitions:
    """Append partitions to a topic (Kafka's CreatePartitions) so that it has ``total``; the proposer placed
    the new ones: per new partition, (voters, preferred leader), as for :class:`CreateTopic`.

    ``total`` must be the topic's count plus ``len(assignments)`` when the command applies, so that two
    requests for the same total, both planned on the old count, add the partitions once: the second fails.
    Partitions are never removed, and internal topics keep their count (``__consumer_offsets`` maps groups
    to partitions by count).
    """

    name: str
    total: int
    assignments: tuple[tuple[tuple[int, ...], int], ...]


# ---------------------------------------------------------------------- end of adding partitions (issue 25)


Command = (
    RegisterNode
    | CreateTopic
    | DeleteTopic
    | AlterTopicConfigs
    | SetPartitionReplicas
    | SetNodeState
    | AllocateProducerIds
    | AlterClusterConfigs
    | SecurityCommand
    | CreatePartitions
)
COMMAND_TYPES: tuple[type[Command], ...] = (
    RegisterNode,
    CreateTopic,
    DeleteTopic,
    AlterTopicConfigs,
    SetPartitionReplicas,
    SetNodeState,
    AllocateProducerIds,
    AlterClusterConfigs,
    *SECURITY_COMMAND_TYPES,
    CreatePartitions,
)
