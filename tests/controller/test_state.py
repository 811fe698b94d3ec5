"""Applying commands: what each one does, and that a failed one changes nothing but the applied index."""

from __future__ import annotations

from dataclasses import replace

import pytest

from multiraft.controller import (
    AllocateProducerIds,
    AlterTopicConfigs,
    ClusterState,
    ControllerArgumentError,
    ControllerError,
    CreateTopic,
    DeleteTopic,
    DuplicateTopicError,
    InvalidAssignmentError,
    InvalidConfigError,
    InvalidNodeError,
    InvalidPartitionCountError,
    InvalidTopicNameError,
    NodeNotDrainedError,
    NodeNotFoundError,
    NodeState,
    OutOfOrderApplyError,
    PartitionNotFoundError,
    ProducerIdBlock,
    RegisterNode,
    SetNodeState,
    SetPartitionReplicas,
    StaleAssignmentError,
    Topic,
    TopicNotFoundError,
    apply,
    validate_topic_configs,
)
from multiraft.controller.state import MAX_PRODUCER_ID_BLOCK, Command

from ._helpers import cluster, create_topic, node, run, step

PINNED = validate_topic_configs({}, creating=True)


def orders(state: ClusterState) -> ClusterState:
    return run(state, CreateTopic("orders", PINNED, (((1, 2, 3), 1), ((2, 3, 1), 2), ((3, 1, 2), 3))))


def assert_refused(state: ClusterState, command: Command, error: type[ControllerError]) -> ControllerError:
    """The command fails with ``error`` and only the applied index moves."""
    after, result = step(state, command)
    assert isinstance(result.error, error), result
    assert not result.changed and result.outcome is None
    assert after == replace(state, applied_index=state.applied_index + 1)
    with pytest.raises(error):
        result.unwrap()
    return result.error


# -------------------------------------------------------------------------------------------------- nodes


def test_registering_a_node_adds_it() -> None:
    state, result = step(ClusterState(), RegisterNode(node(1, rack="a")))
    assert result.ok and result.changed
    assert state.nodes[1] == node(1, rack="a") == result.outcome
    assert state.version == 1 and state.applied_index == 1


def test_a_restarted_node_re_registers_with_new_addresses_rack_and_host_and_stays_draining() -> None:
    state = run(cluster(2), SetNodeState(1, NodeState.DRAINING))
    moved = replace(node(1), client_address="10.9.9.9:9092", rack="b", host="m2")
    state = run(state, RegisterNode(moved))
    assert state.nodes[1] == replace(moved, state=NodeState.DRAINING)


def test_re_registering_an_unchanged_node_is_a_no_op() -> None:
    state = cluster(1)
    after, result = step(state, RegisterNode(node(1)))
    assert result.ok and not result.changed
    assert after.version == state.version


def test_a_removed_node_that_registers_again_comes_back_active() -> None:
    state = run(cluster(2), SetNodeState(2, NodeState.REMOVED))
    assert state.nodes[2].state is NodeState.REMOVED
    state = run(state, RegisterNode(node(2)))
    assert state.nodes[2].state is NodeState.ACTIVE


@pytest.mark.parametrize(
    ("info", "field"),
    [
        (node(0), "node_id"),
        (node(2**31), "node_id"),
        (replace(node(1), client_address="no-port"), "client_address"),
        (replace(node(1), peer_address=":9093"), "peer_address"),
        (replace(node(1), gossip_address="h:70000"), "gossip_address"),
        (replace(node(1), client_address="h h:1"), "client_address"),
        (replace(node(1), capacity=0.0), "capacity"),
        (replace(node(1), capacity=float("nan")), "capacity"),
        (replace(node(1), capacity=1e7), "capacity"),
        (replace(node(1), rack="a\nb"), "rack"),
        (replace(node(1), host="m\t1"), "host"),
        (replace(node(1), host="m" * 65), "host"),
        (replace(node(1), state=NodeState.REMOVED), "state"),
    ],
)
def test_a_node_with_bad_information_is_refused_naming_the_field(info: object, field: str) -> None:
    error = assert_refused(cluster(1), RegisterNode(info), InvalidNodeError)  # type: ignore[arg-type]
    assert isinstance(error, InvalidNodeError) and error.field == field


def test_ipv6_addresses_are_accepted() -> None:
    info = replace(node(1), client_address="[::1]:9092", peer_address="[fe80::1]:9093")
    assert run(ClusterState(), RegisterNode(info)).nodes[1] == info


def test_draining_and_reactivating_a_node() -> None:
    state = run(cluster(3), SetNodeState(2, NodeState.DRAINING))
    assert state.nodes[2].state is NodeState.DRAINING
    state = run(state, SetNodeState(2, NodeState.ACTIVE))
    assert state.nodes[2].state is NodeState.ACTIVE


def test_removing_a_node_that_holds_replicas_is_refused_and_says_how_many() -> None:
    state = orders(cluster(4))
    error = assert_refused(state, SetNodeState(3, NodeState.REMOVED), NodeNotDrainedError)
    assert isinstance(error, NodeNotDrainedError) and error.replicas == 3


def test_a_node_that_is_only_a_learner_cannot_be_removed_either() -> None:
    state = orders(cluster(4))
    state = run(state, SetPartitionReplicas("orders", 0, (1, 2, 3), (4,), 1))
    assert_refused(state, SetNodeState(4, NodeState.REMOVED), NodeNotDrainedError)


def test_removing_an_empty_node_succeeds_and_it_can_no_longer_receive_replicas() -> None:
    state = orders(cluster(4))
    state = run(state, SetNodeState(4, NodeState.REMOVED))
    assert state.nodes[4].state is NodeState.REMOVED
    assert 4 not in state.replica_counts()
    assert_refused(state, SetPartitionReplicas("orders", 0, (1, 2, 3), (4,), 1), NodeNotFoundError)
    assert_refused(state, SetNodeState(4, NodeState.ACTIVE), InvalidNodeError)


def test_changing_the_state_of_an_unknown_node_is_refused() -> None:
    assert_refused(cluster(1), SetNodeState(9, NodeState.DRAINING), NodeNotFoundError)


# ------------------------------------------------------------------------------------------------- topics


def test_creating_a_topic_assigns_consecutive_group_ids_from_one() -> None:
    state, result = step(cluster(3), CreateTopic("orders", PINNED, (((1, 2), 1), ((2, 3), 3)), created_ms=77))
    assert isinstance(result.outcome, Topic)
    topic = state.topic("orders")
    assert topic == result.outcome
    assert [p.group_id for p in topic.partitions] == [1, 2]
    assert topic.partitions[1].replicas == (2, 3) and topic.partitions[1].preferred_leader == 3
    assert topic.created_ms == 77 and topic.configs == PINNED and topic.replication_factor == 2
    assert state.next_group_id == 3


def test_group_ids_are_never_reused_after_a_topic_is_deleted() -> None:
    state = orders(cluster(3))
    state = run(state, DeleteTopic("orders"))
    state = orders(state)
    assert [p.group_id for p in state.topic("orders").partitions] == [4, 5, 6]


def test_creating_a_topic_that_exists_changes_nothing_and_says_so() -> None:
    state = orders(cluster(3))
    error = assert_refused(state, CreateTopic("orders", PINNED, (((1,), 1),)), DuplicateTopicError)
    assert error.reason == "TOPIC_EXISTS"


def test_a_topic_gets_the_configs_given_normalized_and_the_segment_settings_pinned() -> None:
    state = run(cluster(1), CreateTopic("t", {"retention.ms": " -1"}, (((1,), 1),)))
    assert state.topic("t").configs == {**PINNED, "retention.ms": "-1"}


@pytest.mark.parametrize(
    ("command", "error"),
    [
        (CreateTopic("bad name", PINNED, (((1,), 1),)), InvalidTopicNameError),
        (CreateTopic("__offsets", PINNED, (((1,), 1),)), InvalidTopicNameError),
        (CreateTopic("t", {"cleanup.policy": "compact"}, (((1,), 1),)), InvalidConfigError),
        (CreateTopic("t", PINNED, ()), InvalidPartitionCountError),
        (CreateTopic("t", PINNED, (((1, 9), 1),)), NodeNotFoundError),
        (CreateTopic("t", PINNED, (((1, 2, 1), 1),)), InvalidAssignmentError),
        (CreateTopic("t", PINNED, (((1, 2), 3),)), InvalidAssignmentError),
        (CreateTopic("t", PINNED, (((), 1),)), InvalidAssignmentError),
        (CreateTopic("t", PINNED, (((1,), 1), ((2, 2), 2))), InvalidAssignmentError),
        (CreateTopic("t", PINNED, (((1,), 1),), created_ms=-5), ControllerArgumentError),
    ],
)
def test_creating_a_bad_topic_changes_nothing(command: CreateTopic, error: type[ControllerError]) -> None:
    assert_refused(cluster(3), command, error)


def test_a_topic_cannot_be_placed_on_a_removed_node() -> None:
    state = run(cluster(3), SetNodeState(3, NodeState.REMOVED))
    assert_refused(state, CreateTopic("t", PINNED, (((1, 3), 1),)), NodeNotFoundError)


def test_the_system_creates_and_deletes_internal_topics() -> None:
    state = run(cluster(3), CreateTopic("__consumer_offsets", PINNED, (((1, 2, 3), 1),), internal=True))
    assert state.topic("__consumer_offsets").internal
    assert_refused(state, DeleteTopic("__consumer_offsets"), ControllerArgumentError)
    state = run(state, DeleteTopic("__consumer_offsets", internal=True))
    assert not state.topics


def test_deleting_a_topic_returns_it_and_frees_its_nodes() -> None:
    state = orders(cluster(3))
    after, result = step(state, DeleteTopic("orders"))
    assert result.outcome == state.topic("orders")
    assert after.replica_counts() == {1: 0, 2: 0, 3: 0}
    assert after.groups() == {}


def test_deleting_an_unknown_topic_says_so() -> None:
    error = assert_refused(cluster(1), DeleteTopic("nope"), TopicNotFoundError)
    assert error.reason == "UNKNOWN_TOPIC"


# ------------------------------------------------------------------------------------------ topic configs


def test_altering_configs_sets_and_resets_keys() -> None:
    state = orders(cluster(3))
    state = run(state, AlterTopicConfigs("orders", {"retention.ms": "1000", "max.message.bytes": "2048"}))
    assert state.topic("orders").configs == {**PINNED, "retention.ms": "1000", "max.message.bytes": "2048"}
    state = run(state, AlterTopicConfigs("orders", {}, ("retention.ms",)))
    assert state.topic("orders").configs == {**PINNED, "max.message.bytes": "2048"}


def test_altering_a_fixed_config_is_refused() -> None:
    state = orders(cluster(3))
    error = assert_refused(state, AlterTopicConfigs("orders", {"segment.bytes": "2048"}), InvalidConfigError)
    assert isinstance(error, InvalidConfigError) and error.key == "segment.bytes"
    assert_refused(state, AlterTopicConfigs("orders", {}, ("segment.ms",)), InvalidConfigError)


def test_a_max_message_bytes_no_log_entry_can_hold_is_refused_at_create_and_at_alter() -> None:
    too_big = {"max.message.bytes": str(64 * 1024**2)}
    created = assert_refused(cluster(3), CreateTopic("t", too_big, (((1,), 1),)), InvalidConfigError)
    assert isinstance(created, InvalidConfigError) and created.key == "max.message.bytes"
    altered = assert_refused(orders(cluster(3)), AlterTopicConfigs("orders", too_big), InvalidConfigError)
    assert isinstance(altered, InvalidConfigError) and altered.key == "max.message.bytes"
    assert "max_entry_bytes" in str(altered)


def test_restating_a_fixed_config_at_its_current_value_is_allowed() -> None:
    state = orders(cluster(3))
    after, result = step(state, AlterTopicConfigs("orders", {"segment.bytes": " 1073741824 ", "retention.ms": "5000"}))
    assert result.ok
    assert after.topic("orders").configs["retention.ms"] == "5000"


def test_altering_nothing_is_a_successful_no_op() -> None:
    state = run(orders(cluster(3)), AlterTopicConfigs("orders", {"retention.ms": "5"}))
    after, result = step(state, AlterTopicConfigs("orders", {"retention.ms": "5"}, ("retention.bytes",)))
    assert result.ok and not result.changed and after.version == state.version


@pytest.mark.parametrize(
    "command",
    [
        AlterTopicConfigs("orders", {"retention.ms": "x"}),
        AlterTopicConfigs("orders", {"retention.ms": "5"}, ("retention.ms",)),
        AlterTopicConfigs("orders", {}, ("no.such.key",)),
        AlterTopicConfigs("orders", {"retention.ms": "5", "cleanup.policy": "compact"}),
    ],
)
def test_a_bad_alteration_changes_nothing(command: AlterTopicConfigs) -> None:
    assert_refused(orders(cluster(3)), command, InvalidConfigError)


def test_altering_an_unknown_topic_says_so() -> None:
    assert_refused(cluster(1), AlterTopicConfigs("nope", {"retention.ms": "5"}), TopicNotFoundError)


# ------------------------------------------------------------------------------------- replica changes


def test_a_replica_move_adds_a_learner_promotes_it_and_drops_the_old_replica() -> None:
    state = orders(cluster(4))
    state = run(state, SetPartitionReplicas("orders", 0, (1, 2, 3), (4,), 1, (1, 2, 3), ()))
    assert state.partition("orders", 0).learners == (4,)
    assert [p.group_id for p in state.partitions_on_node(4)] == [1]
    state = run(state, SetPartitionReplicas("orders", 0, (1, 2, 3, 4), (), 1))
    state = run(state, SetPartitionReplicas("orders", 0, (2, 3, 4), (), 4))
    moved = state.partition("orders", 0)
    assert (moved.replicas, moved.preferred_leader, moved.group_id) == ((2, 3, 4), 4, 1)
    assert state.replica_counts() == {1: 2, 2: 3, 3: 3, 4: 1}
    assert state.preferred_leader_counts() == {1: 0, 2: 1, 3: 1, 4: 1}


@pytest.mark.parametrize(
    ("command", "error"),
    [
        (SetPartitionReplicas("orders", 0, (1, 2), (2,), 1), InvalidAssignmentError),
        (SetPartitionReplicas("orders", 0, (1, 1), (), 1), InvalidAssignmentError),
        (SetPartitionReplicas("orders", 0, (1, 2), (4, 4), 1), InvalidAssignmentError),
        (SetPartitionReplicas("orders", 0, (1, 2), (), 4), InvalidAssignmentError),
        (SetPartitionReplicas("orders", 0, (), (1,), 1), InvalidAssignmentError),
        (SetPartitionReplicas("orders", 0, (1, 2, 9), (), 1), NodeNotFoundError),
        (SetPartitionReplicas("orders", 3, (1,), (), 1), PartitionNotFoundError),
        (SetPartitionReplicas("orders", -1, (1,), (), 1), PartitionNotFoundError),
        (SetPartitionReplicas("nope", 0, (1,), (), 1), TopicNotFoundError),
        (SetPartitionReplicas("orders", 0, (1, 2, 3), (4,), 1, (1, 2)), StaleAssignmentError),
        (SetPartitionReplicas("orders", 0, (1, 2, 3), (4,), 1, (1, 2, 3), (4,)), StaleAssignmentError),
    ],
)
def test_a_bad_replica_change_changes_nothing(command: SetPartitionReplicas, error: type[ControllerError]) -> None:
    assert_refused(orders(cluster(4)), command, error)


def test_a_replica_may_land_on_a_node_that_began_draining_after_the_move_was_planned() -> None:
    state = run(orders(cluster(4)), SetNodeState(4, NodeState.DRAINING))
    state = run(state, SetPartitionReplicas("orders", 0, (1, 2, 3), (4,), 1))
    assert state.partition("orders", 0).learners == (4,)


# ---------------------------------------------------------------------------------------------- producer ids


def test_producer_id_blocks_are_consecutive_and_start_at_one() -> None:
    state, first = step(ClusterState(), AllocateProducerIds(1000))
    state, second = step(state, AllocateProducerIds(10))
    assert first.outcome == ProducerIdBlock(1, 1000)
    assert second.outcome == ProducerIdBlock(1001, 10)
    assert second.unwrap() == ProducerIdBlock(1001, 10) and ProducerIdBlock(1001, 10).last == 1010
    assert state.next_producer_id == 1011


@pytest.mark.parametrize("count", [0, -1, MAX_PRODUCER_ID_BLOCK + 1])
def test_a_bad_producer_id_count_is_refused(count: int) -> None:
    assert_refused(ClusterState(), AllocateProducerIds(count), ControllerArgumentError)


def test_the_producer_id_space_running_out_is_refused() -> None:
    state = replace(ClusterState(), next_producer_id=2**62 - 5)  # from 2**62 up: replay producer ids
    assert_refused(state, AllocateProducerIds(6), ControllerArgumentError)
    assert step(state, AllocateProducerIds(5))[1].ok


# --------------------------------------------------------------------------------------------- the log


def test_every_command_advances_the_applied_index_but_only_changes_bump_the_version() -> None:
    state = cluster(2)
    assert (state.applied_index, state.version) == (2, 2)
    state, _ = apply(state, 10, DeleteTopic("nope"))
    assert (state.applied_index, state.version) == (10, 2)
    state, _ = apply(state, 11, AllocateProducerIds(1))
    assert (state.applied_index, state.version) == (11, 3)


def test_applying_at_an_old_index_is_a_caller_bug() -> None:
    state = cluster(2)
    with pytest.raises(OutOfOrderApplyError):
        apply(state, 2, AllocateProducerIds(1))


def test_applying_something_that_is_not_a_command_is_a_caller_bug() -> None:
    with pytest.raises(TypeError):
        apply(ClusterState(), 1, "create topic please")  # type: ignore[arg-type]


def test_lookups_name_what_is_missing() -> None:
    state = orders(cluster(3))
    assert state.partition("orders", 2).group_id == 3
    assert state.group(3) == state.partition("orders", 2) and state.group(99) is None
    assert list(state.groups()) == [1, 2, 3]
    with pytest.raises(PartitionNotFoundError, match="has no partition 3"):
        state.partition("orders", 3)
    with pytest.raises(TopicNotFoundError):
        state.topic("nope")
    assert state.partitions_on_node(9) == ()
    assert state.invariant_violations() == []


def test_a_topics_replication_factor_is_that_of_most_of_its_partitions_and_follows_a_changed_topic() -> None:
    state = create_topic(cluster(4), "t", 3, 3)
    assert state.topics["t"].replication_factor == 3  # asked once per partition by the rebalancer: computed once
    p = state.partition("t", 0)
    moving = run(state, SetPartitionReplicas("t", 0, (*p.replicas, 4), (), p.preferred_leader, p.replicas, ()))
    assert moving.topics["t"].replication_factor == 3, "a partition in the middle of a move has one more"
    p1 = moving.partition("t", 1)
    wider = run(moving, SetPartitionReplicas("t", 1, (1, 2, 3, 4), (), p1.preferred_leader, p1.replicas, ()))
    assert wider.topics["t"].replication_factor == 4
