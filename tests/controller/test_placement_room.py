"""Placement within each node's room (issue 13): no replica is planned onto a node that cannot store it, and a
replica a node was assigned but could not store is moved to one that can."""

from __future__ import annotations

from multiraft.controller import (
    ClusterState,
    CreateTopic,
    NodeRoom,
    NodeState,
    ReplicaMove,
    SetNodeState,
    plan_rebalance,
    plan_repair,
    validate_topic_configs,
)

from ._helpers import active, cluster, run

CONFIGS = validate_topic_configs({}, creating=True)
FULL = NodeRoom(0, "disk: 1 bytes free in /data/4, below min_free_disk_bytes 100")


def on_nodes_1_2_3() -> ClusterState:
    return run(cluster(4), CreateTopic("t", CONFIGS, (((1, 2, 3), 1),)))


def test_a_lost_replica_is_replaced_only_on_a_node_with_room() -> None:
    state = on_nodes_1_2_3()
    assert plan_repair(state, {3}, active(state)) == [ReplicaMove("t", 0, None, 4, replaces=3)]
    assert plan_repair(state, {3}, active(state), {4: FULL}) == []


def test_a_replica_its_node_could_not_store_moves_to_a_node_with_room() -> None:
    state = on_nodes_1_2_3()
    group = state.partition("t", 0).group_id
    moves = plan_repair(state, set(), active(state), {4: NodeRoom(5)}, {2: (group,)})
    assert moves == [ReplicaMove("t", 0, 2, 4)]
    assert plan_repair(state, set(), active(state), {4: FULL}, {2: (group,)}) == []
    assert plan_repair(state, set(), active(state), None, {2: (group + 1,)}) == []


def test_a_draining_node_s_replicas_go_only_to_nodes_with_room() -> None:
    state = run(on_nodes_1_2_3(), SetNodeState(3, NodeState.DRAINING))
    assert plan_rebalance(state, active(state), 4) == [ReplicaMove("t", 0, 3, 4)]
    assert plan_rebalance(state, active(state), 4, {4: FULL}) == []


def test_balancing_moves_nothing_onto_a_node_without_room() -> None:
    state = run(cluster(4), *(CreateTopic(f"t{i}", CONFIGS, (((1, 2, 3), 1 + i % 3),)) for i in range(4)))
    balanced = plan_rebalance(state, active(state), 4)
    assert balanced and all(m.to_node == 4 for m in balanced)
    assert plan_rebalance(state, active(state), 4, {4: FULL}) == []
    assert len(plan_rebalance(state, active(state), 4, {4: NodeRoom(1)})) == 1
