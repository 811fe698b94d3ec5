"""Hosts: two replicas of a partition never share a machine, however they got there; racks still spread them."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from multiraft.controller import (
    ClusterState,
    CreateTopic,
    InvalidReplicationFactorError,
    NodeInfo,
    NodeState,
    NotEnoughNodesError,
    RegisterNode,
    SetNodeState,
    place_new_topic,
    plan_rebalance,
    plan_repair,
    validate_topic_configs,
)

from ._helpers import active, cluster, complete_move, create_topic, node, run, spread, step

PINNED = validate_topic_configs({}, creating=True)
THREE_MACHINES = ["m1", "m1", "m2", "m2", "m3", "m3"]  # nodes 1..6, two per machine


def hosts_of(state: ClusterState, replicas: tuple[int, ...]) -> list[str]:
    return [state.nodes[n].host for n in replicas]


def shared_hosts(state: ClusterState) -> list[tuple[str, int, list[str]]]:
    """(topic, partition, hosts) of every partition with two voters or learners on one non-empty host."""
    found = []
    for p in state.groups().values():
        named = [h for h in hosts_of(state, p.members) if h]
        if len(named) != len(set(named)):
            found.append((p.topic, p.partition, named))
    return found


def settle(state: ClusterState, live: list[NodeInfo], max_moves: int = 3, rounds: int = 60) -> ClusterState:
    """Plan balancing moves on ``live`` nodes and complete them until a plan is empty; no move may put two
    replicas of a partition on one host."""
    for _ in range(rounds):
        moves = plan_rebalance(state, live, max_moves)
        if not moves:
            return state
        for move in moves:
            crowded = len(shared_hosts(state))
            state = complete_move(state, move)
            assert len(shared_hosts(state)) <= crowded, move
    raise AssertionError(f"rebalancing did not settle in {rounds} rounds")


# ------------------------------------------------------------------------------------------- new topics


def test_a_new_topic_puts_each_partition_on_as_many_machines_as_replicas() -> None:
    state = create_topic(cluster(6, hosts=THREE_MACHINES), "orders", 12, 3)
    for p in state.groups().values():
        assert sorted(hosts_of(state, p.replicas)) == ["m1", "m2", "m3"]
    assert set(state.replica_counts().values()) == {6}
    assert set(state.preferred_leader_counts().values()) == {2}


def test_nodes_without_a_host_are_each_a_machine_of_their_own() -> None:
    state = create_topic(cluster(3), "plain", 6, 3)  # no hosts at all: as before hosts existed
    assert all(len(p.replicas) == 3 for p in state.groups().values())
    state = create_topic(cluster(4, hosts=["m1", "m1"]), "mixed", 8, 3)
    for p in state.groups().values():
        assert not {1, 2} <= set(p.replicas), p
        assert {3, 4} <= set(p.replicas)  # the only other machines


def test_a_topic_that_needs_more_machines_than_its_nodes_are_on_is_refused_naming_hosts() -> None:
    state = cluster(4, hosts=["m1", "m1", "m2", "m2"])
    with pytest.raises(NotEnoughNodesError) as caught:
        place_new_topic(active(state), state, 1, 3)
    assert (caught.value.required, caught.value.available, caught.value.hosts) == (3, 4, 2)
    assert "distinct hosts" in str(caught.value) and "4 available on 2 host(s)" in str(caught.value)
    assert caught.value.metadata == {"required": "3", "available": "4", "hosts": "2"}
    assert len(place_new_topic(active(state), state, 4, 2)) == 4


def test_racks_still_spread_replicas_among_the_machines_allowed() -> None:
    state = cluster(6, hosts=THREE_MACHINES, racks=["a", "a", "a", "a", "b", "b"])
    state = create_topic(state, "orders", 6, 2)
    for p in state.groups().values():
        assert len(set(hosts_of(state, p.replicas))) == 2
        assert {state.nodes[n].rack for n in p.replicas} == {"a", "b"}


# -------------------------------------------------------------------------------------- repair, drain


def test_a_lost_replica_is_replaced_on_a_machine_its_partition_does_not_use() -> None:
    state = create_topic(cluster(8, hosts=[*THREE_MACHINES, "m4", "m4"]), "orders", 8, 3)
    dead = {1, 2}  # machine m1 is lost
    live = [n for n in active(state) if n.node_id not in dead]
    moves = plan_repair(state, dead, live)
    assert len(moves) == sum(1 for p in state.groups().values() if dead & set(p.replicas))
    for move in moves:
        p = state.partition(move.topic, move.partition)
        assert state.nodes[move.to_node].host not in hosts_of(state, tuple(n for n in p.replicas if n not in dead))
        state = complete_move(state, move)
    for p in state.groups().values():
        assert sorted(hosts_of(state, p.replicas)) == ["m2", "m3", "m4"]


def test_a_replica_lost_with_one_node_may_go_to_that_node_s_machine_mate_but_nowhere_shared() -> None:
    state = create_topic(cluster(6, hosts=THREE_MACHINES), "orders", 6, 3)
    moves = plan_repair(state, {1}, [n for n in active(state) if n.node_id != 1])
    assert {m.to_node for m in moves} == {2}  # m2 and m3 already hold a replica of every partition
    for move in moves:
        state = complete_move(state, move)
    assert shared_hosts(state) == []


def test_repair_leaves_a_partition_short_rather_than_share_a_machine() -> None:
    state = create_topic(cluster(6, hosts=THREE_MACHINES), "orders", 4, 3)
    assert plan_repair(state, {1, 2}, [n for n in active(state) if n.node_id not in (1, 2)]) == []


def test_a_draining_node_hands_its_replicas_to_the_only_machine_left_for_them() -> None:
    state = create_topic(cluster(6, hosts=THREE_MACHINES), "orders", 6, 3)
    held = {p.group_id for p in state.partitions_on_node(1)}
    state = run(state, SetNodeState(1, NodeState.DRAINING))
    state = settle(state, list(active(state)))
    assert state.partitions_on_node(1) == ()
    assert held <= {p.group_id for p in state.partitions_on_node(2)}
    assert shared_hosts(state) == []


# --------------------------------------------------------------------------------------------- balance


def test_balancing_never_moves_a_replica_onto_a_machine_its_partition_uses() -> None:
    state = create_topic(cluster(2, hosts=["m1", "m2"]), "orders", 8, 2)
    state = run(state, RegisterNode(node(3, host="m1")), RegisterNode(node(4, host="m1")))
    state = settle(state, list(active(state)))
    # Node 2 is m2's only node: it keeps its replica of every partition; m1's share spreads over 1, 3, 4.
    assert state.replica_counts()[2] == 8
    assert spread({n: c for n, c in state.replica_counts().items() if n != 2}) <= 1
    for p in state.groups().values():
        assert sorted(hosts_of(state, p.replicas)) == ["m1", "m2"]


def test_partitions_placed_before_their_nodes_named_hosts_are_spread_over_machines() -> None:
    state = create_topic(cluster(4), "orders", 8, 2)
    hosts = {1: "m1", 2: "m1", 3: "m2", 4: "m2"}
    state = run(state, *(RegisterNode(node(n, host=h)) for n, h in hosts.items()))
    assert shared_hosts(state)  # the old placement put some partitions twice on one machine
    state = settle(state, list(active(state)))
    assert shared_hosts(state) == []
    assert spread(state.replica_counts()) <= 1


# ---------------------------------------------------------------------------------------------- property

_NODE = st.tuples(
    st.sampled_from(["", "m1", "m1", "m2", "m2", "m3", "m4"]),
    st.sampled_from(["", "a", "b"]),
    st.sampled_from([1.0, 1.0, 2.0]),
)
_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("create"), st.integers(1, 6), st.integers(1, 3)),
        st.tuples(st.just("fail"), st.integers(1, 9), st.just(0)),
        st.tuples(st.just("drain"), st.integers(1, 9), st.just(0)),
        st.tuples(st.just("join"), st.integers(0, 6), st.just(0)),
        st.tuples(st.just("balance"), st.integers(1, 4), st.just(0)),
    ),
    min_size=1,
    max_size=10,
)


@settings(max_examples=80, deadline=None)
@given(st.lists(_NODE, min_size=1, max_size=9), _OPS)
def test_no_partition_ever_has_two_replicas_on_one_host(
    nodes: list[tuple[str, str, float]], ops: list[tuple[str, int, int]]
) -> None:
    state = run(
        ClusterState(), *(RegisterNode(node(i, host=h, rack=r, capacity=c)) for i, (h, r, c) in enumerate(nodes, 1))
    )
    dead: set[int] = set()

    def live() -> list[NodeInfo]:
        return [n for n in active(state) if n.node_id not in dead]

    for number, (op, a, b) in enumerate(ops):
        if op == "create":
            candidates = live()
            try:
                assignments = place_new_topic(candidates, state, a, b)
            except InvalidReplicationFactorError:
                continue
            except NotEnoughNodesError as exc:
                machines = {n.host or n.node_id for n in candidates}
                assert len(candidates) < b or (exc.hosts is not None and exc.hosts == len(machines) < b)
                continue
            state = run(state, CreateTopic(f"t{number}", PINNED, tuple(assignments)))
        elif op == "fail" and a in state.nodes:
            dead.add(a)
            for move in plan_repair(state, dead, live()):
                state = complete_move(state, move)
                assert shared_hosts(state) == [], move
        elif op == "drain" and a in state.nodes and a not in dead:
            state, result = step(state, SetNodeState(a, NodeState.DRAINING))
            if result.ok:
                state = settle(state, live())
        elif op == "join":
            new_id = max(state.nodes) + 1
            state = run(state, RegisterNode(node(new_id, host=["", "m1", "m2", "m5"][a % 4])))
        elif op == "balance":
            state = settle(state, live(), max_moves=a)
        assert shared_hosts(state) == [], (op, a, b)
        assert state.invariant_violations() == []
    for p in state.groups().values():
        assert Counter(p.replicas).most_common(1)[0][1] == 1
