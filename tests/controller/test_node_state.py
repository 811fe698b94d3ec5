"""An operator's drain, undrain and removal of a node, as the controller leader judges them.

Draining is refused while it would leave fewer active nodes, or hosts they run on, than a topic's replication
factor (Redpanda refuses such a decommission), unless forced; undraining brings a draining node back to active;
a removed node stays removed until it registers again.
"""

from __future__ import annotations

import pytest

from multiraft.controller import (
    DrainUnderReplicatesError,
    InvalidNodeError,
    NodeNotFoundError,
    NodeState,
    SetNodeState,
    node_state_change,
)

from ._helpers import cluster, create_topic, run


def test_with_no_topics_every_node_may_be_drained() -> None:
    state = cluster(3)
    for node_id in (1, 2, 3):
        state = run(state, node_state_change(state, node_id, NodeState.DRAINING))
    assert [n.state for n in state.nodes.values()] == [NodeState.DRAINING] * 3


def test_a_drain_that_leaves_fewer_active_nodes_than_a_topics_replication_factor_is_refused() -> None:
    state = create_topic(create_topic(cluster(4), "wide", 1, 3), "narrow", 1, 1)
    state = run(state, node_state_change(state, 4, NodeState.DRAINING))  # 3 active remain for RF 3
    with pytest.raises(DrainUnderReplicatesError) as raised:
        node_state_change(state, 3, NodeState.DRAINING)
    assert raised.value.metadata == {"node_id": "3", "topic": "wide", "replication_factor": "3", "remaining": "2"}


def test_a_drain_that_leaves_fewer_hosts_than_a_topics_replication_factor_is_refused() -> None:
    state = create_topic(cluster(6, hosts=["m1", "m1", "m2", "m2", "m3", "m3"]), "wide", 1, 3)
    state = run(state, node_state_change(state, 1, NodeState.DRAINING))  # node 2 still serves machine m1
    with pytest.raises(DrainUnderReplicatesError) as raised:
        node_state_change(state, 2, NodeState.DRAINING)
    assert "4 active node(s) on 2 host(s)" in str(raised.value)
    assert raised.value.metadata["hosts"] == "2"
    assert node_state_change(state, 2, NodeState.DRAINING, force=True) == SetNodeState(2, NodeState.DRAINING)


def test_a_forced_drain_is_accepted_and_a_draining_node_may_be_drained_again() -> None:
    state = create_topic(cluster(3), "orders", 1, 3)
    assert node_state_change(state, 3, NodeState.DRAINING, force=True) == SetNodeState(3, NodeState.DRAINING)
    state = run(state, SetNodeState(3, NodeState.DRAINING))
    assert node_state_change(state, 3, NodeState.DRAINING) == SetNodeState(3, NodeState.DRAINING)


def test_undrain_makes_a_draining_node_active_again() -> None:
    state = create_topic(cluster(3), "orders", 1, 3)
    state = run(state, node_state_change(state, 2, NodeState.DRAINING, force=True))
    state = run(state, node_state_change(state, 2, NodeState.ACTIVE))
    assert state.nodes[2].state is NodeState.ACTIVE
    assert node_state_change(state, 1, NodeState.DRAINING, force=True).state is NodeState.DRAINING


def test_a_removed_node_stays_removed_and_an_unknown_node_is_refused() -> None:
    state = cluster(3)
    state = run(state, SetNodeState(3, NodeState.DRAINING), SetNodeState(3, NodeState.REMOVED))
    for target in NodeState:
        with pytest.raises(InvalidNodeError, match="removed"):
            node_state_change(state, 3, target)
    with pytest.raises(NodeNotFoundError):
        node_state_change(state, 7, NodeState.ACTIVE)
