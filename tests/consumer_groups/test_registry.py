"""The replicated side: a replica keeps each group's last record, and a new leader coordinates from it."""

from __future__ import annotations

from multiraft.consumer_groups import (
    GroupRecords,
    GroupState,
    GroupTombstone,
    JoinReply,
    MemberSubscription,
    assign_for_leader,
    decode_group_record,
    encode_group_record,
    topics_without_racks,
)

from ._harness import Group, counter_ids


def test_a_new_leader_coordinates_every_group_from_the_records_its_replica_applied() -> None:
    orders, billing = Group({"orders": 4}, group_id="orders"), Group({"billing": 2}, group_id="billing")
    for group in (orders, billing):
        group.add("a")
        group.add("b")
        group.settle()
    replica = GroupRecords()
    for payload in orders.log + billing.log:  # interleaved in the partition's log, in commit order
        replica.apply(decode_group_record(payload))
    restored = GroupRecords()
    restored.load(decode_group_record(encode_group_record(r)) for r in replica.records())  # a snapshot
    for group in (orders, billing):
        coordinator = restored.coordinator(group.group_id, counter_ids(), 0)
        assert coordinator.state is GroupState.STABLE
        assert coordinator.generation == group.coordinator.generation
        assert set(coordinator.member_ids) == set(group.coordinator.member_ids)


def test_a_deleted_or_unknown_group_starts_empty_on_the_new_leader() -> None:
    group = Group({"t": 1})
    group.add("a")
    group.settle()
    replica = GroupRecords()
    for record in group.records:
        replica.apply(record)
    replica.apply(GroupTombstone(group.group_id))
    assert replica.records() == []
    fresh = replica.coordinator(group.group_id, counter_ids(), 0)
    assert (fresh.state, fresh.generation, fresh.member_ids) == (GroupState.EMPTY, 0, ())


def test_the_leaders_assignment_is_computed_with_the_groups_protocol_only_by_the_leader() -> None:
    group = Group({"t": 4})
    group.add("a", "range")
    group.add("b", "range")
    group.settle()
    members = group.coordinator.snapshot(0).members
    subscriptions = tuple(MemberSubscription(m.member_id, None, m.subscription) for m in members)
    leader = group.coordinator.leader_id
    reply = JoinReply(leader, 2, "consumer", "range", leader, members=subscriptions)
    plan = dict(assign_for_leader(reply, topics_without_racks({"t": 4})))
    assert sorted(len(p) for p in plan.values()) == [2, 2]
    follower = JoinReply("other", 2, "consumer", "range", leader)
    assert assign_for_leader(follower, topics_without_racks({"t": 4})) == ()
