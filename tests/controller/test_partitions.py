"""Adding partitions to a topic (Kafka's CreatePartitions): apply, the codec, placement and replay."""

from __future__ import annotations

import pytest

from multiraft.controller import (
    ClusterState,
    ControllerArgumentError,
    CreatePartitions,
    CreateTopic,
    DeleteTopic,
    NodeRoom,
    NotEnoughNodesError,
    NotEnoughStorageError,
    TopicNotFoundError,
    decode_command,
    decode_snapshot,
    encode_command,
    encode_snapshot,
    partitions_to_add,
    place_new_topic,
    validate_topic_configs,
)

from ._helpers import active, cluster, create_topic, run, step


def _grow(state: ClusterState, name: str, total: int) -> CreatePartitions:
    """The command the controller leader proposes: the new partitions placed on every active node."""
    adding = partitions_to_add(state, name, total)
    rf = state.topic(name).replication_factor
    assignments = place_new_topic(list(active(state)), state, adding, rf)
    return CreatePartitions(name, total, tuple((tuple(r), leader) for r, leader in assignments))


def test_added_partitions_are_appended_with_new_groups_and_the_topic_replication_factor() -> None:
    state = create_topic(create_topic(cluster(4), "orders", 2, 3), "other", 1, 2)
    before = state.topic("orders").partitions
    state, result = step(state, _grow(state, "orders", 5))
    assert result.ok and result.changed
    topic = state.topic("orders")
    assert topic.partitions[:2] == before
    assert [p.partition for p in topic.partitions] == [0, 1, 2, 3, 4]
    new_groups = [p.group_id for p in topic.partitions[2:]]
    used = {p.group_id for t in ("orders", "other") for p in state.topic(t).partitions[: 2 if t == "orders" else 1]}
    assert not set(new_groups) & used and len(set(new_groups)) == 3
    assert state.next_group_id == max(new_groups) + 1
    assert all(len(p.replicas) == 3 and p.preferred_leader == p.replicas[0] for p in topic.partitions[2:])
    assert result.outcome == topic
    assert state.invariant_violations() == []


def test_placement_of_new_partitions_evens_out_replica_counts() -> None:
    state = create_topic(cluster(3), "orders", 1, 1, nodes=[cluster(3).nodes[1]])  # node 1 holds 1 replica
    state = run(state, _grow(state, "orders", 3))
    assert sorted(state.replica_counts().values()) == [1, 1, 1]


@pytest.mark.parametrize(
    ("total", "message"),
    [
        (2, "topic 'orders' already has 2 partitions"),
        (1, "topic 'orders' has 2 partitions, more than the requested 1: partitions can be added, never removed"),
        (0, "more than the requested 0"),
    ],
)
def test_a_total_that_is_not_above_the_current_count_is_refused_precisely(total: int, message: str) -> None:
    state = create_topic(cluster(3), "orders", 2, 1)
    with pytest.raises(ControllerArgumentError, match=message) as raised:
        partitions_to_add(state, "orders", total)
    assert raised.value.field == "partitions"
    after, result = step(state, CreatePartitions("orders", total, ()))
    assert isinstance(result.error, ControllerArgumentError) and message in str(result.error)
    assert after.topics == state.topics


def test_an_unknown_topic_is_refused() -> None:
    with pytest.raises(TopicNotFoundError):
        partitions_to_add(cluster(1), "nope", 3)


def test_an_internal_topic_keeps_its_partition_count() -> None:
    state = cluster(1)
    configs = validate_topic_configs({}, creating=True)
    state = run(state, CreateTopic("__consumer_offsets", configs, (((1,), 1),), internal=True))
    with pytest.raises(ControllerArgumentError, match="internal topic"):
        partitions_to_add(state, "__consumer_offsets", 2)
    _, result = step(state, CreatePartitions("__consumer_offsets", 2, (((1,), 1),)))
    assert isinstance(result.error, ControllerArgumentError)


def test_two_requests_for_the_same_total_planned_on_the_old_count_add_the_partitions_once() -> None:
    state = create_topic(cluster(3), "orders", 1, 1)
    first, second = _grow(state, "orders", 3), _grow(state, "orders", 3)
    state = run(state, first)
    after, result = step(state, second)
    assert isinstance(result.error, ControllerArgumentError)
    assert "already has 3 partitions" in str(result.error)
    assert len(after.topic("orders").partitions) == 3


def test_assignments_that_do_not_make_the_total_are_refused() -> None:
    state = create_topic(cluster(3), "orders", 1, 1)
    _, result = step(state, CreatePartitions("orders", 4, (((1,), 1),)))
    assert isinstance(result.error, ControllerArgumentError)
    assert "1 new partition(s) do not make 4" in str(result.error)


def test_a_bad_assignment_refuses_the_whole_command() -> None:
    state = create_topic(cluster(3), "orders", 1, 1)
    after, result = step(state, CreatePartitions("orders", 3, (((1,), 1), ((9,), 9))))
    assert result.error is not None
    assert len(after.topic("orders").partitions) == 1 and after.next_group_id == state.next_group_id


def test_placement_refuses_what_the_live_nodes_cannot_take() -> None:
    state = create_topic(cluster(3), "orders", 1, 3)
    with pytest.raises(NotEnoughNodesError):
        place_new_topic(list(active(state))[:2], state, 2, state.topic("orders").replication_factor)
    room = {n: NodeRoom(0, "disk full") for n in state.nodes}
    with pytest.raises(NotEnoughStorageError):
        place_new_topic(list(active(state)), state, 2, 3, room)


def test_the_command_round_trips_and_its_format_is_stable() -> None:
    command = CreatePartitions("orders", 3, (((1, 2), 1), ((2, 1), 2)))
    data = encode_command(command)
    assert data == b'{"assignments":[[[1,2],1],[[2,1],2]],"name":"orders","t":"create_partitions","total":3,"v":1}'
    assert decode_command(data) == command


def test_added_partitions_survive_a_snapshot_and_a_replay() -> None:
    start = create_topic(cluster(3), "orders", 1, 2)
    grow = _grow(start, "orders", 4)
    replayed = run(decode_snapshot(encode_snapshot(start)), decode_command(encode_command(grow)))
    direct = run(start, grow)
    assert replayed == direct
    assert decode_snapshot(encode_snapshot(direct)) == direct


def test_deleting_a_grown_topic_frees_every_partition() -> None:
    state = create_topic(cluster(3), "orders", 1, 1)
    state = run(state, _grow(state, "orders", 3), DeleteTopic("orders"))
    assert state.groups() == {}
