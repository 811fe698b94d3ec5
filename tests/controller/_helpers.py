"""Building clusters and driving the controller state machine in tests."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from multiraft.controller import (
    ApplyResult,
    ClusterState,
    Command,
    CreateTopic,
    NodeInfo,
    NodeState,
    RegisterNode,
    ReplicaMove,
    SetPartitionReplicas,
    apply,
    place_new_topic,
    replica_move_step,
    validate_topic_configs,
)


def node(
    node_id: int, *, rack: str = "", capacity: float = 1.0, state: NodeState = NodeState.ACTIVE, host: str = ""
) -> NodeInfo:
    return NodeInfo(
        node_id,
        f"10.0.0.{node_id}:9092",
        f"10.0.0.{node_id}:9093",
        f"10.0.0.{node_id}:9094",
        rack,
        capacity,
        state,
        host,
    )


def step(state: ClusterState, command: Command) -> tuple[ClusterState, ApplyResult]:
    """Apply ``command`` at the next index."""
    return apply(state, state.applied_index + 1, command)


def run(state: ClusterState, *commands: Command) -> ClusterState:
    """Apply every command at the next indexes, each of which must succeed."""
    for command in commands:
        state, result = step(state, command)
        assert result.ok, result.error
    return state


def cluster(
    count: int,
    *,
    racks: Sequence[str] = (),
    capacities: Mapping[int, float] | None = None,
    hosts: Sequence[str] = (),
) -> ClusterState:
    """Nodes 1..count, racks assigned round-robin when given; ``hosts[i - 1]`` is node i's host (default "")."""
    nodes = [
        node(
            i,
            rack=racks[(i - 1) % len(racks)] if racks else "",
            capacity=(capacities or {}).get(i, 1.0),
            host=hosts[i - 1] if i <= len(hosts) else "",
        )
        for i in range(1, count + 1)
    ]
    return run(ClusterState(), *(RegisterNode(n) for n in nodes))


def active(state: ClusterState) -> tuple[NodeInfo, ...]:
    return state.nodes_in_state(NodeState.ACTIVE)


def create_topic(
    state: ClusterState,
    name: str,
    partitions: int,
    replication_factor: int,
    *,
    nodes: Iterable[NodeInfo] | None = None,
    configs: Mapping[str, str] | None = None,
) -> ClusterState:
    """Place a topic on ``nodes`` (default: every active node) and create it."""
    candidates = list(nodes) if nodes is not None else list(active(state))
    assignments = place_new_topic(candidates, state, partitions, replication_factor)
    command = CreateTopic(name, validate_topic_configs(configs or {}, creating=True), tuple(assignments))
    return run(state, command)


def complete_move(state: ClusterState, move: ReplicaMove) -> ClusterState:
    """Drive a move through its steps (learner, promotion, removal) as the runtime would."""
    commands: list[SetPartitionReplicas] = []
    for _ in range(4):
        command = replica_move_step(state, move)
        if command is None:
            return state
        commands.append(command)
        state = run(state, command)
    raise AssertionError(f"move {move} did not finish: {commands}")


def spread(counts: Mapping[int, int]) -> int:
    return max(counts.values()) - min(counts.values()) if counts else 0
