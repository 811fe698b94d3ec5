"""apply(): the deterministic transition function of the controller's replicated state."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from ._model import (
    MAX_PRODUCER_ID,
    AllocateProducerIds,
    AlterClusterConfigs,
    AlterTopicConfigs,
    ClusterState,
    Command,
    CreatePartitions,
    CreateTopic,
    DeleteTopic,
    NodeInfo,
    NodeState,
    PartitionState,
    RegisterNode,
    SetNodeState,
    SetPartitionReplicas,
    Topic,
    check_node_info,
)
from .cluster_config import cluster_config_key, topic_defaults, validate_cluster_configs
from .errors import (
    ControllerArgumentError,
    ControllerError,
    DuplicateTopicError,
    InvalidAssignmentError,
    InvalidConfigError,
    InvalidNodeError,
    InvalidPartitionCountError,
    NodeNotDrainedError,
    NodeNotFoundError,
    OutOfOrderApplyError,
    StaleAssignmentError,
)
from .security import SECURITY_COMMAND_TYPES, SecurityCommand, apply_security
from .topic_config import SEGMENT_BYTES, SEGMENT_MS, config_key, validate_topic_configs, validate_topic_name

__all__ = ["ProducerIdBlock", "Outcome", "ApplyResult", "apply", "MAX_PRODUCER_ID_BLOCK", "partitions_to_add"]

MAX_PRODUCER_ID_BLOCK = 1_000_000


@dataclass(frozen=True)
class ProducerIdBlock:
    """Producer ids ``first`` .. ``first + count - 1``, reserved for one node to hand out."""

    first: int
    count: int

    @property
    def last(self) -> int:
        return self.first + self.count - 1


Outcome = NodeInfo | Topic | PartitionState | ProducerIdBlock | None


@dataclass(frozen=True)
class ApplyResult:
    """What applying one command did: its outcome, or the error that made it a no-op.

    Outcomes: RegisterNode and SetNodeState give the stored NodeInfo; CreateTopic, CreatePartitions,
    AlterTopicConfigs and DeleteTopic the Topic (the deleted one for DeleteTopic); SetPartitionReplicas the
    PartitionState; AllocateProducerIds a ProducerIdBlock. ``changed`` is False for failures and for commands
    that found the state already as asked.
    """

    index: int
    command: Command
    outcome: Outcome = None
    error: ControllerError | None = None
    changed: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None

    def unwrap(self) -> Outcome:
        """The outcome, or raise the error (for the proposer that waits on its command)."""
        if self.error is not None:
            raise self.error
        return self.outcome


def apply(state: ClusterState, index: int, command: Command) -> tuple[ClusterState, ApplyResult]:
    """Apply the command committed at Raft ``index``; return the new state and what happened.

    A command that fails leaves everything but ``applied_index`` unchanged and reports its error in the
    result: every replica reaches the same verdict, so the failure is part of the replicated history.
    ``index`` must be above ``state.applied_index`` (gaps are fine: not every Raft entry is a command);
    otherwise :class:`OutOfOrderApplyError` is raised and nothing is applied.
    """
    if index <= state.applied_index:
        raise OutOfOrderApplyError(f"index {index} is not after the applied index {state.applied_index}")
    handler = _HANDLERS.get(type(command))
    if handler is None:
        raise TypeError(f"not a controller command: {type(command).__name__}")
    try:
        changes, outcome = handler(state, command)
    except ControllerError as exc:
        return replace(state, applied_index=index), ApplyResult(index, command, error=exc)
    changed = bool(changes)
    new_state = replace(state, applied_index=index, version=state.version + changed, **changes)
    return new_state, ApplyResult(index, command, outcome, changed=changed)


_Changes = dict[str, Any]


def _register_node(state: ClusterState, command: RegisterNode) -> tuple[_Changes, Outcome]:
    node = command.node
    check_node_info(node)
    existing = state.nodes.get(node.node_id)
    if node.state is NodeState.REMOVED:
        raise InvalidNodeError("state", "a node cannot register as removed")
    if existing is not None and existing.state is not NodeState.REMOVED:
        # Re-registration updates addresses and capacity; a restart must not end a drain.
        node = replace(node, state=existing.state)
    if node == existing:
        return {}, node
    return {"nodes": {**state.nodes, node.node_id: node}}, node


def _create_topic(state: ClusterState, command: CreateTopic) -> tuple[_Changes, Outcome]:
    validate_topic_name(command.name, internal=command.internal)
    if command.name in state.topics:
        raise DuplicateTopicError(command.name)
    # The keys pinned at creation take the cluster's defaults (log.segment.bytes, log.roll.ms) when unset.
    pinned = {k: v for k, v in topic_defaults(state.cluster_configs).items() if k in (SEGMENT_BYTES, SEGMENT_MS)}
    configs = validate_topic_configs({**pinned, **command.configs}, creating=True)
    if not command.assignments:
        raise InvalidPartitionCountError(0)
    if command.created_ms < 0:
        raise ControllerArgumentError("created_ms", f"must be >= 0, got {command.created_ms}")
    partitions = []
    for number, (replicas, preferred_leader) in enumerate(command.assignments):
        _check_assignment(state, replicas, (), preferred_leader)
        group_id = state.next_group_id + number
        partitions.append(PartitionState(command.name, number, group_id, tuple(replicas), (), preferred_leader))
    topic = Topic(command.name, tuple(partitions), configs, command.internal, command.created_ms)
    changes = {"topics": {**state.topics, topic.name: topic}, "next_group_id": state.next_group_id + len(partitions)}
    return changes, topic


def _check_assignment(
    state: ClusterState,
    replicas: tuple[int, ...],
    learners: tuple[int, ...],
    preferred_leader: int,
) -> None:
    if not replicas:
        raise InvalidAssignmentError("replicas", "a partition needs at least one replica")
    _check_distinct("replicas", replicas)
    _check_distinct("learners", learners)
    overlap = sorted(set(replicas) & set(learners))
    if overlap:
        raise InvalidAssignmentError("learners", f"node {overlap[0]} is both a voter and a learner")
    if preferred_leader not in replicas:
        raise InvalidAssignmentError("preferred_leader", f"node {preferred_leader} is not one of {replicas}")
    for node_id in (*replicas, *learners):
        node = state.nodes.get(node_id)
        if node is None:
            raise NodeNotFoundError(node_id)
        # Draining nodes are accepted: a command planned before the drain began may land after it, and the
        # drain then moves the replica again. Refusing would strand a half-done move.
        if node.state is NodeState.REMOVED:
            raise NodeNotFoundError(node_id, f"node {node_id} is removed")


def _check_distinct(name: str, nodes: tuple[int, ...]) -> None:
    seen: set[int] = set()
    for node in nodes:
        if node in seen:
            raise InvalidAssignmentError(name, f"node {node} appears twice in {nodes}")
        seen.add(node)


def _delete_topic(state: ClusterState, command: DeleteTopic) -> tuple[_Changes, Outcome]:
    topic = state.topic(command.name)
    if topic.internal and not command.internal:
        raise ControllerArgumentError("name", f"{command.name!r} is an internal topic and cannot be deleted")
    topics = {name: t for name, t in state.topics.items() if name != command.name}
    return {"topics": topics}, topic


def _alter_topic_configs(state: ClusterState, command: AlterTopicConfigs) -> tuple[_Changes, Outcome]:
    topic = state.topic(command.name)
    both = sorted(set(command.set) & set(command.delete))
    if both:
        raise InvalidConfigError(both[0], "is both set and deleted")
    to_set = dict(command.set)
    for key in sorted(command.set):
        spec = config_key(key)
        # Re-stating a fixed key's current value is allowed so that declarative tools can send everything.
        if not spec.alterable and spec.normalize(command.set[key]) == topic.configs.get(key):
            del to_set[key]
    normalized = validate_topic_configs(to_set, creating=False)
    for key in command.delete:
        if not config_key(key).alterable:
            raise InvalidConfigError(key, "cannot be altered after the topic is created")
    configs = {k: v for k, v in topic.configs.items() if k not in command.delete}
    configs = dict(sorted({**configs, **normalized}.items()))
    if configs == topic.configs:
        return {}, topic
    altered = replace(topic, configs=configs)
    return {"topics": {**state.topics, topic.name: altered}}, altered


def _alter_cluster_configs(state: ClusterState, command: AlterClusterConfigs) -> tuple[_Changes, Outcome]:
    both = sorted(set(command.set) & set(command.delete))
    if both:
        raise InvalidConfigError(both[0], "is both set and deleted")
    normalized = validate_cluster_configs(command.set)
    for key in command.delete:
        cluster_config_key(key)
    configs = {k: v for k, v in state.cluster_configs.items() if k not in command.delete}
    configs = dict(sorted({**configs, **normalized}.items()))
    if configs == dict(state.cluster_configs):
        return {}, None
    return {"cluster_configs": configs}, None


def _set_partition_replicas(state: ClusterState, command: SetPartitionReplicas) -> tuple[_Changes, Outcome]:
    current = state.partition(command.topic, command.partition)
    if (command.expected_replicas is not None and command.expected_replicas != current.replicas) or (
        command.expected_learners is not None and command.expected_learners != current.learners
    ):
        raise StaleAssignmentError(
            f"{command.topic}/{command.partition} has replicas {current.replicas} learners {current.learners}, "
            f"not the expected {command.expected_replicas} {command.expected_learners}"
        )
    replicas, learners = tuple(command.replicas), tuple(command.learners)
    _check_assignment(state, replicas, learners, command.preferred_leader)
    updated = replace(current, replicas=replicas, learners=learners, preferred_leader=command.preferred_leader)
    if updated == current:
        return {}, current
    topic = state.topics[command.topic]
    partitions = tuple(updated if p.partition == command.partition else p for p in topic.partitions)
    return {"topics": {**state.topics, topic.name: replace(topic, partitions=partitions)}}, updated


def _set_node_state(state: ClusterState, command: SetNodeState) -> tuple[_Changes, Outcome]:
    node = state.nodes.get(command.node_id)
    if node is None:
        raise NodeNotFoundError(command.node_id)
    if node.state is command.state:
        return {}, node
    if node.state is NodeState.REMOVED:
        raise InvalidNodeError("state", f"node {command.node_id} is removed; it must register again")
    if command.state is NodeState.REMOVED:
        hosted = len(state.partitions_on_node(command.node_id))
        if hosted:
            raise NodeNotDrainedError(command.node_id, hosted)
    updated = replace(node, state=command.state)
    return {"nodes": {**state.nodes, node.node_id: updated}}, updated


def _allocate_producer_ids(state: ClusterState, command: AllocateProducerIds) -> tuple[_Changes, Outcome]:
    if not 1 <= command.count <= MAX_PRODUCER_ID_BLOCK:
        raise ControllerArgumentError("count", f"must be in [1, {MAX_PRODUCER_ID_BLOCK}], got {command.count}")
    block = ProducerIdBlock(state.next_producer_id, command.count)
    if block.last > MAX_PRODUCER_ID:
        raise ControllerArgumentError("count", "the producer id space is exhausted")
    changes: _Changes = {"next_producer_id": block.last + 1}
    if command.principal:
        changes["security"] = state.security.bind_producer_ids(block.first, block.count, command.principal)
    return changes, block


def _security(state: ClusterState, command: SecurityCommand) -> tuple[_Changes, Outcome]:
    security = apply_security(state.security, command)
    return ({} if security is state.security else {"security": security}), None


# ------------------------------------------------------------------------ adding partitions (issue 25)


def partitions_to_add(state: ClusterState, name: str, total: int) -> int:
    """How many partitions growing topic ``name`` to ``total`` adds; the controller leader asks before placing
    them and apply() again. Raises :class:`TopicNotFoundError`, or :class:`ControllerArgumentError` (field
    ``partitions``) for an internal topic or a total that is not above the current count."""
    topic = state.topic(name)
    current = len(topic.partitions)
    if topic.internal:
        raise ControllerArgumentError(
            "partitions",
            f"{name!r} is an internal topic: its partition count is fixed (the system maps keys to partitions by it)",
        )
    if total == current:
        raise ControllerArgumentError("partitions", f"topic {name!r} already has {current} partitions")
    if total < current:
        raise ControllerArgumentError(
            "partitions",
            f"topic {name!r} has {current} partitions, more than the requested {total}: partitions can be "
            "added, never removed",
        )
    return total - current


def _create_partitions(state: ClusterState, command: CreatePartitions) -> tuple[_Changes, Outcome]:
    adding = partitions_to_add(state, command.name, command.total)
    if adding != len(command.assignments):
        # Planned on another count (a concurrent request got there first): refuse rather than overshoot.
        raise ControllerArgumentError(
            "partitions",
            f"topic {command.name!r} has {command.total - adding} partitions; {len(command.assignments)} new "
            f"partition(s) do not make {command.total}",
        )
    topic = state.topics[command.name]
    partitions = list(topic.partitions)
    for offset, (replicas, preferred_leader) in enumerate(command.assignments):
        _check_assignment(state, replicas, (), preferred_leader)
        partitions.append(
            PartitionState(
                command.name, len(partitions), state.next_group_id + offset, tuple(replicas), (), preferred_leader
            )
        )
    grown = replace(topic, partitions=tuple(partitions))
    changes = {"topics": {**state.topics, topic.name: grown}, "next_group_id": state.next_group_id + adding}
    return changes, grown


# ---------------------------------------------------------------------- end of adding partitions (issue 25)


_HANDLERS: dict[type, Callable[[ClusterState, Any], tuple[_Changes, Outcome]]] = {
    RegisterNode: _register_node,
    CreateTopic: _create_topic,
    DeleteTopic: _delete_topic,
    AlterTopicConfigs: _alter_topic_configs,
    SetPartitionReplicas: _set_partition_replicas,
    SetNodeState: _set_node_state,
    AllocateProducerIds: _allocate_producer_ids,
    AlterClusterConfigs: _alter_cluster_configs,
    **dict.fromkeys(SECURITY_COMMAND_TYPES, _security),
    CreatePartitions: _create_partitions,  # adding partitions (issue 25)
}
