"""Placement: new topics spread evenly, leaders balance, rebalancing converges, repair restores copies."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from multiraft.controller import (
    ClusterState,
    CreateTopic,
    InvalidPartitionCountError,
    InvalidReplicationFactorError,
    NodeState,
    NotEnoughNodesError,
    PreferredLeaderChange,
    RegisterNode,
    ReplicaMove,
    SetNodeState,
    SetPartitionReplicas,
    partitions_without_quorum,
    place_new_topic,
    plan_preferred_leaders,
    plan_rebalance,
    plan_repair,
    preferred_leader_moves,
    replica_move_step,
    validate_topic_configs,
)

from ._helpers import active, cluster, complete_move, create_topic, node, run, spread, step

PINNED = validate_topic_configs({}, creating=True)


def racks_of(state: ClusterState, nodes: tuple[int, ...]) -> set[str]:
    return {state.nodes[n].rack for n in nodes}


def apply_leader_changes(state: ClusterState, changes: list[PreferredLeaderChange]) -> ClusterState:
    for change in changes:
        p = state.partition(change.topic, change.partition)
        assert p.preferred_leader == change.from_node and change.to_node in p.replicas
        state = run(state, SetPartitionReplicas(p.topic, p.partition, p.replicas, p.learners, change.to_node))
    return state


def check_plan(state: ClusterState, moves: list[ReplicaMove], max_moves: int) -> None:
    """A plan proposes only moves that apply() will accept, at most one per partition."""
    assert len(moves) <= max_moves
    assert len({(m.topic, m.partition) for m in moves}) == len(moves)
    for move in moves:
        p = state.partition(move.topic, move.partition)
        assert move.from_node in p.replicas
        assert move.to_node not in p.members
        assert state.nodes[move.to_node].state is NodeState.ACTIVE


def rebalance_until_done(state: ClusterState, max_moves: int) -> ClusterState:
    """Plan, complete every move, and plan again until a plan is empty."""
    # Every replica moving twice (once for counts, once for leaders) is far more than convergence needs.
    rounds = 2 * sum(len(p.replicas) for p in state.groups().values()) // max_moves + 2
    for _ in range(rounds):
        moves = plan_rebalance(state, active(state), max_moves)
        check_plan(state, moves, max_moves)
        if not moves:
            return state
        for move in moves:
            racks_before = racks_of(state, state.partition(move.topic, move.partition).replicas)
            balancing = move.from_node is not None and state.nodes[move.from_node].state is NodeState.ACTIVE
            state = complete_move(state, move)
            if balancing:
                assert len(racks_of(state, state.partition(move.topic, move.partition).replicas)) >= len(racks_before)
    raise AssertionError(f"rebalancing did not settle in {rounds} rounds")


# ------------------------------------------------------------------------------------------- new topics


def test_a_new_topic_on_a_fresh_cluster_spreads_replicas_and_leaders_evenly() -> None:
    state = cluster(6)
    assignments = place_new_topic(active(state), state, 12, 3)
    state = run(state, CreateTopic("orders", PINNED, tuple(assignments)))
    assert set(state.replica_counts().values()) == {6}
    assert set(state.preferred_leader_counts().values()) == {2}
    for replicas, leader in assignments:
        assert replicas[0] == leader and len(set(replicas)) == 3


def test_replicas_of_a_partition_go_to_distinct_racks() -> None:
    state = cluster(6, racks=["a", "b", "c"])
    for replicas, _ in place_new_topic(active(state), state, 10, 3):
        assert racks_of(state, replicas) == {"a", "b", "c"}


def test_with_fewer_racks_than_replicas_every_rack_is_still_used() -> None:
    state = cluster(4, racks=["a", "b"])
    for replicas, _ in place_new_topic(active(state), state, 6, 3):
        assert racks_of(state, replicas) == {"a", "b"}


def test_a_new_topic_goes_to_the_least_loaded_nodes_first() -> None:
    state = create_topic(cluster(3), "old", 4, 3)
    state = run(state, *(RegisterNode(node(i)) for i in (4, 5, 6)))
    assignments = place_new_topic(active(state), state, 4, 3)
    assert {n for replicas, _ in assignments for n in replicas} == {4, 5, 6}
    state = run(state, CreateTopic("new", PINNED, tuple(assignments)))
    assert spread(state.preferred_leader_counts()) <= 1


def test_a_node_with_twice_the_capacity_receives_twice_the_replicas() -> None:
    state = cluster(3, capacities={3: 2.0})
    state = create_topic(state, "orders", 8, 2)
    assert state.replica_counts() == {1: 4, 2: 4, 3: 8}
    assert state.preferred_leader_counts() == {1: 2, 2: 2, 3: 4}


def test_only_live_active_registered_candidates_receive_replicas() -> None:
    state = run(cluster(5), SetNodeState(5, NodeState.DRAINING))
    candidates = [*active(state), state.nodes[5], node(9)]  # draining, and never registered
    candidates = [n for n in candidates if n.node_id != 4]  # believed dead
    for replicas, _ in place_new_topic(candidates, state, 6, 2):
        assert set(replicas) <= {1, 2, 3}


@pytest.mark.parametrize("replication_factor", [0, -1, 4])
def test_a_replication_factor_outside_the_cluster_size_is_invalid(replication_factor: int) -> None:
    state = cluster(3)
    with pytest.raises(InvalidReplicationFactorError) as caught:
        place_new_topic(active(state), state, 1, replication_factor)
    assert caught.value.reason == "INVALID_ARGUMENT"


def test_too_few_live_nodes_for_the_replication_factor_is_not_enough_replicas() -> None:
    state = cluster(3)
    with pytest.raises(NotEnoughNodesError) as caught:
        place_new_topic(active(state)[:2], state, 1, 3)
    assert (caught.value.reason, caught.value.required, caught.value.available) == ("NOT_ENOUGH_REPLICAS", 3, 2)


def test_a_topic_needs_a_partition() -> None:
    state = cluster(3)
    with pytest.raises(InvalidPartitionCountError):
        place_new_topic(active(state), state, 0, 1)


CLUSTER_SIZES = st.integers(1, 12)


@settings(max_examples=100, deadline=None)
@given(CLUSTER_SIZES, st.integers(1, 5), st.integers(1, 40))
def test_a_fresh_cluster_gets_counts_and_leaders_within_one(nodes: int, rf: int, partitions: int) -> None:
    state = cluster(nodes)
    rf = min(rf, nodes)
    assignments = place_new_topic(active(state), state, partitions, rf)
    state = run(state, CreateTopic("t", PINNED, tuple(assignments)))
    assert all(len(set(replicas)) == rf for replicas, _ in assignments)
    assert spread(state.replica_counts()) <= 1
    assert spread(state.preferred_leader_counts()) <= 1


@settings(max_examples=100, deadline=None)
@given(CLUSTER_SIZES, st.lists(st.tuples(st.integers(1, 20), st.integers(1, 5)), min_size=1, max_size=4))
def test_successive_topics_keep_replica_counts_within_one_and_leaders_within_one_unless_forced(
    nodes: int, topics: list[tuple[int, int]]
) -> None:
    state = cluster(nodes)
    for number, (partitions, rf) in enumerate(topics):
        state = create_topic(state, f"t{number}", partitions, min(rf, nodes))
        assert spread(state.replica_counts()) <= 1
        # A partition with one replica must be led where its replica went, which replica balance decides.
        single_replica = any(min(rf, nodes) == 1 for _, rf in topics[: number + 1])
        assert spread(state.preferred_leader_counts()) <= (2 if single_replica else 1)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from("abcd"), min_size=1, max_size=12), st.integers(1, 5), st.integers(1, 20))
def test_replicas_span_as_many_racks_as_they_can(racks: list[str], rf: int, partitions: int) -> None:
    state = cluster(len(racks), racks=racks)
    rf = min(rf, len(racks))
    for replicas, leader in place_new_topic(active(state), state, partitions, rf):
        assert len(set(replicas)) == rf and leader in replicas
        assert len(racks_of(state, replicas)) == min(rf, len(set(racks)))


# ------------------------------------------------------------------------------------------- leadership


def test_partitions_led_away_from_their_healthy_preferred_leader_are_moved_back() -> None:
    state = create_topic(cluster(3), "orders", 3, 3)
    groups = state.groups()
    preferred = {g: p.preferred_leader for g, p in groups.items()}
    leaders = {1: preferred[1], 2: preferred[1], 3: preferred[1]}
    moves = preferred_leader_moves(state, leaders, healthy={1, 2, 3})
    assert moves == [(g, preferred[g]) for g in (2, 3)]
    assert preferred_leader_moves(state, leaders, healthy={preferred[1]}) == []
    assert preferred_leader_moves(state, {}, healthy={1, 2, 3}) == []  # no leader known: nobody to ask
    assert preferred_leader_moves(state, {2: 0, 99: 1}, healthy={1, 2, 3}) == []  # leaderless; unknown group


def test_a_draining_preferred_leader_is_not_given_leadership_back() -> None:
    state = create_topic(cluster(3), "orders", 3, 3)
    draining = state.partition("orders", 0).preferred_leader
    state = run(state, SetNodeState(draining, NodeState.DRAINING))
    other = next(n for n in (1, 2, 3) if n != draining)
    assert all(g != 1 for g, _ in preferred_leader_moves(state, {1: other}, {1, 2, 3}))


def test_preferred_leadership_moves_off_a_draining_node_and_stays_balanced() -> None:
    state = create_topic(cluster(4), "orders", 8, 3)
    state = run(state, SetNodeState(1, NodeState.DRAINING))
    state = apply_leader_changes(state, plan_preferred_leaders(state, active(state)))
    counts = state.preferred_leader_counts()
    assert counts[1] == 0
    assert spread({n: c for n, c in counts.items() if n != 1}) <= 1
    assert plan_preferred_leaders(state, active(state)) == []


def test_balanced_preferred_leaders_are_left_alone() -> None:
    state = create_topic(cluster(5), "orders", 10, 3)
    assert plan_preferred_leaders(state, active(state)) == []


# ---------------------------------------------------------------------------------------------- moves


def test_a_replica_move_goes_learner_then_voter_then_drops_the_old_replica() -> None:
    state = run(cluster(4), CreateTopic("t", PINNED, (((1, 2, 3), 1),)))
    move = ReplicaMove("t", 0, 1, 4)
    steps = []
    while (command := replica_move_step(state, move)) is not None:
        steps.append((command.replicas, command.learners, command.preferred_leader))
        state = run(state, command)
    assert steps == [((1, 2, 3), (4,), 1), ((1, 2, 3, 4), (), 1), ((2, 3, 4), (), 4)]


def test_a_move_step_planned_before_a_concurrent_change_fails_without_effect() -> None:
    state = run(cluster(5), CreateTopic("t", PINNED, (((1, 2, 3), 1),)))
    stale = replica_move_step(state, ReplicaMove("t", 0, 1, 4))
    assert stale is not None
    state = run(state, SetPartitionReplicas("t", 0, (1, 2, 3), (5,), 1))
    after, result = step(state, stale)
    assert result.error is not None and result.error.reason == "ASSIGNMENT_CHANGED"
    assert after.partition("t", 0) == state.partition("t", 0)


def test_an_empty_new_node_receives_replicas_until_counts_are_within_one() -> None:
    state = create_topic(cluster(3), "orders", 12, 3)
    state = run(state, RegisterNode(node(4)))
    state = rebalance_until_done(state, max_moves=2)
    assert state.replica_counts() == {1: 9, 2: 9, 3: 9, 4: 9}
    state = apply_leader_changes(state, plan_preferred_leaders(state, active(state)))
    assert set(state.preferred_leader_counts().values()) == {3}


def test_a_draining_node_is_emptied_and_can_then_be_removed() -> None:
    state = create_topic(cluster(4), "orders", 8, 3)
    state = run(state, SetNodeState(2, NodeState.DRAINING))
    state = rebalance_until_done(state, max_moves=3)
    assert state.partitions_on_node(2) == ()
    assert state.preferred_leader_counts()[2] == 0
    state = run(state, SetNodeState(2, NodeState.REMOVED))
    assert spread(state.replica_counts()) <= 1


def test_a_rebalance_never_lowers_the_racks_a_partition_spans() -> None:
    state = create_topic(cluster(4, racks=["a", "b"]), "orders", 8, 2)
    state = run(state, RegisterNode(node(5, rack="a")), RegisterNode(node(6, rack="b")))
    state = rebalance_until_done(state, max_moves=4)
    for p in state.groups().values():
        assert racks_of(state, p.replicas) == {"a", "b"}
    assert spread(state.replica_counts()) <= 1


def test_partitions_with_a_move_in_flight_are_left_alone() -> None:
    state = create_topic(cluster(3), "orders", 3, 3)
    state = run(state, RegisterNode(node(4)))
    p = state.partition("orders", 0)
    state = run(state, SetPartitionReplicas("orders", 0, p.replicas, (4,), p.preferred_leader))
    assert all(m.partition != 0 for m in plan_rebalance(state, active(state), 10))


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 6),
    st.integers(0, 6),
    st.lists(st.tuples(st.integers(1, 12), st.integers(1, 3)), min_size=1, max_size=3),
    st.integers(1, 8),
    st.booleans(),
)
def test_rebalancing_converges_to_counts_and_leaders_within_one(
    first: int, added: int, topics: list[tuple[int, int]], max_moves: int, drain: bool
) -> None:
    state = cluster(first)
    for number, (partitions, rf) in enumerate(topics):
        state = create_topic(state, f"t{number}", partitions, min(rf, first))
    state = run(state, *(RegisterNode(node(first + i)) for i in range(1, added + 1)))
    rf_max = max(min(rf, first) for _, rf in topics)
    draining = drain and first + added > rf_max
    if draining:
        state = run(state, SetNodeState(1, NodeState.DRAINING))
    state = rebalance_until_done(state, max_moves)
    state = apply_leader_changes(state, plan_preferred_leaders(state, active(state)))
    live = {n.node_id for n in active(state)}
    assert spread({n: c for n, c in state.replica_counts().items() if n in live}) <= 1
    if max_moves >= 2:  # balancing leaders may take a swap of two replicas
        assert spread({n: c for n, c in state.preferred_leader_counts().items() if n in live}) <= 1
    if draining:
        assert state.partitions_on_node(1) == ()
    assert state.invariant_violations() == []


# --------------------------------------------------------------------------------------------- repair


def test_a_dead_nodes_replicas_are_replaced_on_live_nodes_in_its_rack_spread() -> None:
    state = create_topic(cluster(6, racks=["a", "b", "c"]), "orders", 6, 3)
    moves = plan_repair(state, {1}, active(state))
    lost = [p for p in state.groups().values() if 1 in p.replicas]
    assert len(moves) == len(lost)
    for move in moves:
        assert move.from_node is None and move.replaces == 1 and move.to_node != 1
        state = complete_move(state, move)
    for p in state.groups().values():
        assert 1 not in p.replicas and len(p.replicas) == 3
        assert racks_of(state, p.replicas) == {"a", "b", "c"}


def test_partitions_that_lost_their_quorum_are_not_repaired_but_reported() -> None:
    state = run(cluster(5), CreateTopic("t", PINNED, (((1, 2, 3), 1), ((1, 4, 5), 4))))
    dead = {1, 2}
    assert [(m.partition, m.replaces) for m in plan_repair(state, dead, active(state))] == [(1, 1)]
    assert [p.partition for p in partitions_without_quorum(state, dead)] == [0]


def test_a_replacement_already_under_way_is_not_planned_twice() -> None:
    state = create_topic(cluster(4), "t", 1, 3)
    dead = state.partition("t", 0).replicas[1]
    move = plan_repair(state, {dead}, active(state))[0]
    state = run(state, replica_move_step(state, move))  # type: ignore[arg-type]
    assert plan_repair(state, {dead}, active(state)) == []


def test_repair_does_what_it_can_when_too_few_nodes_are_left() -> None:
    state = create_topic(cluster(3), "t", 2, 3)
    assert plan_repair(state, {3}, active(state)) == []


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.sampled_from(["", "a", "b", "c"]), min_size=2, max_size=9),
    st.lists(st.tuples(st.integers(1, 8), st.integers(1, 4)), min_size=1, max_size=3),
    st.data(),
)
def test_repair_restores_the_replication_factor_using_only_live_nodes(
    racks: list[str], topics: list[tuple[int, int]], data: st.DataObject
) -> None:
    state = cluster(len(racks), racks=racks)
    for number, (partitions, rf) in enumerate(topics):
        state = create_topic(state, f"t{number}", partitions, min(rf, len(racks)))
    dead = set(data.draw(st.lists(st.integers(1, len(racks)), max_size=len(racks) - 1)))
    live = [n for n in active(state) if n.node_id not in dead]
    before = {p.group_id: p for p in state.groups().values()}
    moves = plan_repair(state, dead, active(state))
    for move in moves:
        p = state.partition(move.topic, move.partition)
        assert move.from_node is None and move.replaces in p.replicas and move.replaces in dead
        assert move.to_node not in dead and move.to_node not in p.members
    assert max(Counter((m.topic, m.partition, m.replaces) for m in moves).values(), default=1) == 1
    for move in moves:
        state = complete_move(state, move)
    stuck = {p.group_id for p in partitions_without_quorum(state, dead)}
    for group_id, p in state.groups().items():
        old = before[group_id]
        assert len(p.replicas) == len(old.replicas)
        if group_id in stuck:
            assert p == old
            continue
        lost = [r for r in old.replicas if r in dead]
        spare = len(live) - (len(old.replicas) - len(lost))
        assert sum(r in dead for r in p.replicas) == max(0, len(lost) - spare)
